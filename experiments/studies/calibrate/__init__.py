"""`make calibrate`: time real collectives on this machine and fit the network model to them
(docs/network.md, "Calibration"). Nothing imports this role."""
