"""`make reproduce`: the laptop-scale studies that judge the papers' claims (docs/reproduce.md)."""
