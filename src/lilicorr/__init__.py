"""lilicorr: train, ship, run and measure LiLiCorr speculative-decoding drafters."""

__version__ = "0.1.0"
