"""Trust boundaries: the master key, sealed secrets and attempt MACs, the outbound guard and bounded
answers, the values and archives users hand in, and cells written for spreadsheets."""
