"""Tests of analysis/: loading, statistics, report, figures, notebooks."""
