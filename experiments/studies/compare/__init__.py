"""`make compare METHOD=<name>[,<name>...]`: one standard battery for any registered method, its
verdicts beside every other method's (experiments/studies/compare/__main__.py)."""
