from .relay import main

main()
