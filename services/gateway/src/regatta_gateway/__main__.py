from regatta_gateway.app import main

main()
