"""What a run writes and how it is read (run directory files, metric keys, headline metrics, the
run store), and the few facts every floor needs (ConfigError, runtime settings, console lines,
cache locations). The bottom floor: it imports nothing of sparsebench, so anything may import it."""
