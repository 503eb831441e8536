"""What the tests share and are not tests themselves: reference implementations, harnesses run as
torchrun scripts, the stepped ranks, recorders, fixtures' builders, and `mutants.py` (make mutants)."""
