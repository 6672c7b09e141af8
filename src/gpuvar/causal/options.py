"""The causal stage's settings as one object, built from the config model.

`CausalOptions` is the config's `causal` section (gpuvar.config.Causal: every default, bound and description
defined there once) plus what one run analyses: the target, the group column and the features. The command
line, the workflow rule and a library caller all build it the same way, so a bound such as
`collinear_threshold > 0.5` holds everywhere, not only in a config file.
"""

from __future__ import annotations

from pydantic import Field

from gpuvar.config import Causal, Features, validated


class CausalOptions(Causal):
    """What `gpuvar causal` does; `per_group` and `rows` are the workflow's choices of what to pass, unused here."""

    target: str = Field(description="target column, the sink of every graph")
    group_by: str | None = Field("kernel_name", description="one graph per value of this column (None: only all rows)")
    features: Features = Field("auto", description="'auto' (numeric, non-id columns) or the feature columns")


def causal_options(**values) -> CausalOptions:
    """CausalOptions from keyword values; a bad value is one ConfigError line ("causal options: engine: ...")."""
    if isinstance(values.get("features"), str) and values["features"] != "auto":
        values["features"] = [f.strip() for f in values["features"].split(",") if f.strip()]
    return validated(CausalOptions, values, "causal options")
