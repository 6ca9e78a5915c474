"""Figures (matplotlib, headless): attention over bags, tokens and sentence pairs."""

import matplotlib

matplotlib.use("Agg")
