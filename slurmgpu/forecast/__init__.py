"""Demand forecasts per partition from accounting history (docs/forecast.md)."""

from slurmgpu.forecast.pipeline import Forecast, ForecastOptions, forecast

__all__ = ["Forecast", "ForecastOptions", "forecast"]
