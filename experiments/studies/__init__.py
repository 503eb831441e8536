"""The studies: commands that drive many runs of the engine and read them with the analysis
(`make reproduce`, `make endtoend`, `make calibrate`, `make bench`). Nothing imports them."""
