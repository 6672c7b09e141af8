"""The compare stage's settings as one object: `gpuvar compare`'s command line, the workflow's rule and a
library caller build it the same way.

Its fields are defined once elsewhere: the statistics and the per-pair choices in gpuvar.config
(CompareStatistics; a config comparison inherits the choices), the seed from the causal section and the figure
settings from the plots section, each field taken with its default, bounds and description, so no default or
bound is written twice.
"""

from __future__ import annotations

from typing import Literal

from pydantic import field_validator

from gpuvar.config import Causal, CompareStatistics, Float, Int, Plots, Seed, validated


class CompareSettings(CompareStatistics):
    """Everything `gpuvar.compare.run.compare_runs` reads."""

    seed: Seed = Causal.model_fields["seed"]
    min_probability: Float = Plots.model_fields["min_probability"]
    formats: list[Literal["svg", "png"]] = Plots.model_fields["formats"]
    dpi: Int = Plots.model_fields["dpi"]

    _formats = field_validator("formats")(Plots._formats.__func__)  # once each, in the order given


def compare_settings(**values) -> CompareSettings:
    """CompareSettings from keyword values; a bad value is one ConfigError line ("compare settings: ...")."""
    return validated(CompareSettings, values, "compare settings")
