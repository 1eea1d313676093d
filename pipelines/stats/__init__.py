"""Interval estimation for autocorrelated reward curves: the warehouse's method in numpy and its simulation study."""
