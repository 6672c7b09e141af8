"""What each finding predicts for a re-run with its cause removed, with an interval: the half of the loop that
`gpuvar verify` closes (gpuvar.findings.verify).

Why: a finding such as "aten::mm varies with the step's size" or "curand is slower beside a copy" is a claim a
user will act on. Stated as an intervention and a predicted outcome, it can be checked on the re-run: fix the
size, remove the copy, and the time per launch, the time per step and the CV within call sites should land where
the finding says. No peer tool closes that loop.

The intervention, as data:
  fix_size        the size driver (a launch parameter, an input shape, the step's threads) held at one value;
                  the value is the re-run's (read by verify), the reference one the median of this run
  remove_context  the context driver (a concurrent copy, other processes' kernels on the GPU, other streams)
                  absent: its value 0
The model is per call site and makes no shape assumption: this run's launches of the call site, binned by the
driver's value (each distinct value a bin, or 64 quantile bins), keep their count, mean duration and spread. The
duration at a value v is the mean of the launches recorded at v (when at least EXACT_MIN were), else of the
launches nearest v (the nearest bins, until NEIGHBOURS launches are covered), so a library that switches kernel variants with the size, or a GEMM whose time grows
with the square of the length, is predicted as recorded, not as a line. For a re-run of N launches at the call
site, the 90 % interval of its mean time per launch is mean +- 1.645 sqrt(sd^2/K + sd^2/N) (K: the launches the
prediction used): the uncertainty of the recorded mean plus the re-run's own sampling. Sums over call sites (the
time per step, the group's time per launch) add the variances. The CV within call sites at v comes from the same
neighbours' spread; its interval from the chi-square distribution of a pooled variance.

Context findings also state the saving: the time the affected launches spent above the model's time without the
cause, per affected step and over the run, with its interval.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

NEIGHBOURS = 8  # launches a prediction averages at least (fewer when the value itself was recorded EXACT_MIN times)
EXACT_MIN = 3
MAX_BINS = 64
Z90 = 1.6448536269514722
SIZE_INTERVENTION, CONTEXT_INTERVENTION = "fix_size", "remove_context"
COLUMN_OF_BLOCK = {"other processes' kernels on the GPU": "ctx_other_process_overlap"}
CONTEXT_COLUMNS = ("ctx_copy_active", "ctx_memset_active", "ctx_kernels_concurrent", "ctx_other_process_overlap")


@dataclass
class Estimate:
    """A predicted mean with its variance (for a re-run of `rerun_launches` launches)."""

    mean: float
    var: float

    def interval(self) -> list[float]:
        half = Z90 * float(np.sqrt(max(self.var, 0.0)))
        return [self.mean - half, self.mean + half]


def _bins(x: np.ndarray, d: np.ndarray) -> list[dict]:
    """Per distinct value of x (or per quantile bin): value, count, mean duration, sum of squared deviations."""
    frame = pd.DataFrame({"x": x, "d": d})
    if frame["x"].nunique() > MAX_BINS:
        edges = np.unique(np.quantile(x, np.linspace(0, 1, MAX_BINS + 1)))
        frame["bin"] = np.clip(np.searchsorted(edges, x, side="right") - 1, 0, len(edges) - 2)
        key = frame.groupby("bin")["x"].transform("median")
        frame["x"] = key
    g = frame.groupby("x", sort=True)["d"]
    mean, count = g.mean(), g.size()
    durations, members = frame["d"].to_numpy(), g.indices
    return [
        {"x": float(v), "n": int(count[v]), "mean": float(mean[v]), "m2": _sum_of_squares(durations[members[v]])}
        for v in mean.index
    ]


def _bins_by_site(x: np.ndarray, d: np.ndarray, fitted: dict) -> dict:
    """_bins(x[rows], d[rows]) for each call site's rows (ascending) in `fitted`, the same lists to the bit.

    Why: _bins per call site is a pandas DataFrame and groupby each, ~1 ms, so a group of ~700 call sites spent
    most of its prediction there. Here the call sites whose driver takes at most MAX_BINS values (most of them)
    are binned together: rows sorted by (call site, value), stable, so each bin's rows keep their row order; the
    bin's value is its first row's, as pandas' factorize keeps the first it sees (0.0 or -0.0); its mean from
    pandas' grouped mean (the same compensated sum over the same rows in the same order); its count; its sum of
    squares as _sum_of_squares. The others are binned one by one (quantile bins)."""
    sites = list(fitted)
    if not sites:
        return {}
    rows = np.concatenate([fitted[site] for site in sites])
    label = np.repeat(np.arange(len(sites)), [len(fitted[site]) for site in sites])
    xs, ds = x[rows], d[rows]
    order = np.lexsort((xs, label))  # (site, value), stable: a bin's rows in row order (0.0 and -0.0 one bin)
    xo, lo = xs[order], label[order]
    starts = np.r_[True, (lo[1:] != lo[:-1]) | (xo[1:] != xo[:-1])]
    first = np.flatnonzero(starts)  # each bin's first row
    quantiles = np.bincount(lo[first], minlength=len(sites)) > MAX_BINS  # sites binned by quantile, one by one
    out = {site: _bins(x[fitted[site]], d[fitted[site]]) if quantiles[i] else [] for i, site in enumerate(sites)}
    bin_of = np.empty(len(rows), np.int64)
    bin_of[order] = np.cumsum(starts) - 1
    mean = pd.Series(ds).groupby(bin_of, sort=True).mean().to_numpy()
    for b, (start, end) in enumerate(zip(first, np.r_[first[1:], len(order)])):
        if not quantiles[lo[start]]:
            out[sites[lo[start]]].append(
                {"x": float(xo[start]), "n": int(end - start), "mean": float(mean[b]),
                 "m2": _sum_of_squares(ds[order[start:end]])}
            )  # fmt: skip
    return out


def _sum_of_squares(d: np.ndarray) -> float:
    """Sum of squared deviations from the mean, in the arithmetic of `((s - s.mean()) ** 2).sum()` on a float64
    Series (numpy's pairwise sum, divided by the count): the models keep their bytes. Why not that Series
    expression through groupby.apply: a Series per bin, most of the findings' prediction time at ~700 call sites."""
    return float(((d - d.sum() / len(d)) ** 2).sum())


@dataclass
class Scale:
    """What a sampled group's launches stand for (gpuvar.findings.sample): per call site its launches and the
    distinct steps they ran in (None where some launch has no step), the context columns that were ever non-zero
    beside any of its launches, and the group's own numbers over every launch."""

    launches: dict[str, int]
    steps: dict[str, int | None]
    loud: set[str]
    observed: dict
    group_steps: int  # the distinct steps of the group's launches

    @classmethod
    def of(cls, summary, g: int, dec) -> Scale:
        launches, steps = {}, {}
        for c in summary.cells_of(g):
            site = str(summary.sites[summary.cell_site[c]])
            launches[site] = int(summary.cell_n[c])
            known = summary.cell_with_step[c] == summary.cell_n[c]
            steps[site] = summary.cell_steps.get(int(c)) if known else None
        loud = {column for column, seen in summary.tally.loud.items() if len(seen) > g and seen[g]}
        observed = {"time_per_launch_ns": round(dec.mean_ns, 3), "cv_within_call_site": round(dec.cv_within, 6)}
        return cls(launches, steps, loud, observed, summary.sampled_group_steps(g).steps)

    def factor(self, site: str, fitted: int) -> float:
        """Launches of the call site per launch of its sample."""
        return self.launches.get(site, fitted) / max(fitted, 1)


def site_model(
    x: np.ndarray, d: np.ndarray, steps: np.ndarray | None, launches=None, step_count=None, bins=None
) -> dict:
    """The stored model of one call site (see the module docstring). `launches` and `step_count`: the call
    site's launches and distinct steps when x and d are its sample; `bins`: _bins(x, d) where the caller has it."""
    n = len(d) if launches is None else launches
    if step_count is not None:
        per_step = float(n / step_count)
    else:
        per_step = float(n / len(np.unique(steps))) if steps is not None and len(steps) else 1.0
    return {
        "n": int(n),
        "launches_per_step": round(per_step, 6),
        "x_min": float(np.min(x)) if n else None,
        "x_max": float(np.max(x)) if n else None,
        "bins": _bins(x, d) if bins is None else bins,
    }


def at_value(model: dict, v: float) -> tuple[float, float, int]:
    """(mean duration, sd of a launch, launches used) at driver value v: the nearest bins' pooled launches."""
    bins = model["bins"]
    exact = [b for b in bins if b["x"] == v]
    want = EXACT_MIN if exact and exact[0]["n"] >= EXACT_MIN else NEIGHBOURS
    order = sorted(range(len(bins)), key=lambda i: (abs(bins[i]["x"] - v), bins[i]["x"]))
    n = total = m2 = 0.0
    chosen = []
    for i in order:
        if n >= want and abs(bins[i]["x"] - v) > abs(bins[chosen[-1]]["x"] - v):
            break  # bins at the same distance as the last one taken are taken too
        chosen.append(i)
        n += bins[i]["n"]
        total += bins[i]["mean"] * bins[i]["n"]
    mean = total / n if n else float("nan")
    for i in chosen:  # pooled sum of squares about the pooled mean
        b = bins[i]
        m2 += b["m2"] + b["n"] * (b["mean"] - mean) ** 2
    sd = float(np.sqrt(m2 / (n - 1))) if n > 1 else 0.0
    return float(mean), sd, int(n)


def predict(models: dict[str, dict], values: dict[str, float], rerun_launches: dict[str, int] | None = None) -> dict:
    """Predicted time per launch, time per step and CV within call sites when each call site's driver is at
    values[site] (sites without a value are left out), for a re-run of rerun_launches[site] launches (default: as
    many as recorded)."""
    from scipy.stats import chi2

    launch, step, weights = Estimate(0.0, 0.0), Estimate(0.0, 0.0), 0.0
    pooled_var = pooled_n = pooled_df = mean_sum = 0.0
    used = {}
    for site, model in models.items():
        if site not in values or values[site] is None:
            continue
        mean, sd, k = at_value(model, values[site])
        if not np.isfinite(mean):
            continue
        n_new = (rerun_launches or {}).get(site, model["n"])
        var_mean = sd**2 / max(k, 1) + sd**2 / max(n_new, 1)
        per_step = model["launches_per_step"]
        step.mean += per_step * mean
        step.var += per_step**2 * var_mean
        launch.mean += per_step * mean
        launch.var += per_step**2 * var_mean
        weights += per_step
        pooled_var += (k - 1) * sd**2
        pooled_df += k - 1
        pooled_n += k
        mean_sum += k * mean
        used[site] = {"value": values[site], "mean_ns": mean, "sd_ns": sd, "launches_used": k}
    if not weights:
        return {"sites": used}
    launch = Estimate(launch.mean / weights, launch.var / weights**2)
    out = {"sites": used, "time_per_launch_ns": launch, "time_per_step_ns": step}
    if pooled_df > 0 and mean_sum > 0:
        var = pooled_var / pooled_df
        mean_all = mean_sum / pooled_n
        lo, hi = chi2.ppf([0.05, 0.95], pooled_df)
        out["cv_within_call_site"] = {
            "value": float(np.sqrt(var) / mean_all),
            "interval": [
                float(np.sqrt(var * pooled_df / hi) / mean_all),
                float(np.sqrt(var * pooled_df / lo) / mean_all),
            ],
        }
    return out


def rounded(prediction: dict) -> dict:
    """The prediction as JSON: estimates as value and 90 % interval."""
    out = {}
    for key, value in prediction.items():
        if isinstance(value, Estimate):
            out[key] = {"value": round(value.mean, 3), "interval": [round(v, 3) for v in value.interval()]}
        elif key == "cv_within_call_site":
            out[key] = {"value": round(value["value"], 6), "interval": [round(v, 6) for v in value["interval"]]}
        elif key == "sites":
            out[key] = {
                s: {k: round(v, 3) if isinstance(v, float) else v for k, v in r.items()} for s, r in value.items()
            }
    return out


def _driver_column(finding: dict, part: pd.DataFrame) -> str | None:
    """The column an intervention acts on: the first driver that is one column of the table (a block's column)."""
    for driver in finding["drivers"]:
        column = COLUMN_OF_BLOCK.get(driver["feature"], driver["feature"])
        if column in part.columns and pd.api.types.is_numeric_dtype(part[column]):
            return column
    return None


def finding_prediction(finding: dict, part: pd.DataFrame, sites: np.ndarray, scale: Scale | None = None) -> dict | None:
    """The prediction record of one finding (None when nothing explains it: an unexplained spread has no model to
    predict a re-run from; the check it states is still written). `scale`: `part` is the group's sample; the
    models' launch counts, the context this run had and its own numbers are the whole group's, the saving the
    sample's scaled per call site."""
    if finding["verdict"]["verdict"] not in ("explained", "partly explained") or not finding["drivers"]:
        return None
    column = _driver_column(finding, part)
    if column is None:
        return None
    kind = next(d["kind"] for d in finding["drivers"] if COLUMN_OF_BLOCK.get(d["feature"], d["feature"]) == column)
    if kind not in ("size", "context"):
        return None
    x = pd.to_numeric(part[column], errors="coerce").to_numpy(np.float64)
    d = pd.to_numeric(part["duration"], errors="coerce").to_numpy(np.float64)
    steps = pd.to_numeric(part["step"], errors="coerce").to_numpy() if "step" in part.columns else None
    models, reference = {}, {}
    members = _site_rows(sites)
    finite = np.isfinite(x) & np.isfinite(d)
    fitted = {site: site_rows[finite[site_rows]] for site, site_rows in members.items()}
    fitted = {site: rows for site, rows in fitted.items() if len(rows) >= 2}
    bins = _bins_by_site(x, d, fitted)
    for site, rows in fitted.items():
        site_rows = members[site]
        s = steps[rows] if steps is not None and np.isfinite(steps[rows]).all() else None
        if scale is None:
            models[str(site)] = site_model(x[rows], d[rows], s, bins=bins[site])
        else:
            launches = round(len(rows) * scale.factor(str(site), len(site_rows)))
            known = scale.steps.get(str(site)) if s is not None else None
            models[str(site)] = site_model(x[rows], d[rows], s, launches, known, bins=bins[site])
        reference[str(site)] = 0.0 if kind == "context" else float(np.median(x[rows]))
    if not models:
        return None
    intervention = (
        {"type": CONTEXT_INTERVENTION, "feature": column, "value": 0.0}
        if kind == "context"
        else {"type": SIZE_INTERVENTION, "feature": column, "value": "one value (the re-run's); reference: the median"}
    )
    quiet = [  # context this run never had beside these launches: a re-run that adds it changes more than the cause
        c
        for c in CONTEXT_COLUMNS
        if c != column
        and c in part.columns
        and (c not in scale.loud if scale else (pd.to_numeric(part[c], errors="coerce").fillna(0) == 0).all())
    ]
    record = {
        "intervention": intervention,
        "model": {"feature": column, "sites": models},
        "context_absent": quiet,
        "at_reference": rounded(predict(models, reference)) | {"values": reference},
        "observed": scale.observed if scale else _observed(part, sites, d),
    }
    if kind == "context":
        record["saving"] = _saving(models, members, x, d, steps, scale)
    return record


def _site_rows(sites: np.ndarray) -> dict:
    """Each call site (sorted) -> its rows, in row order. Why: a mask `sites == site` per call site compared every
    row's text with every call site's, the most of a prediction's time at ~700 call sites."""
    values, inverse = np.unique(sites, return_inverse=True)
    inverse = inverse.reshape(-1)  # (numpy 2.0 and 2.1 gave it the input's shape)
    order = np.argsort(inverse, kind="stable")
    bounds = np.searchsorted(inverse[order], np.arange(len(values) + 1))
    return {site: order[bounds[i] : bounds[i + 1]] for i, site in enumerate(values.tolist())}


def _observed(part: pd.DataFrame, sites: np.ndarray, d: np.ndarray) -> dict:
    """This run's own numbers, to set beside the prediction: mean time per launch and CV within call sites."""
    frame = pd.DataFrame({"site": sites, "d": d})
    within = frame["d"] - frame.groupby("site")["d"].transform("mean")
    mean = float(frame["d"].mean()) if len(frame) else 0.0
    return {
        "time_per_launch_ns": round(mean, 3),
        "cv_within_call_site": round(float(np.sqrt((within**2).mean()) / mean), 6) if mean > 0 else 0.0,
    }


def _saving(models, members: dict, x, d, steps, scale: Scale | None = None) -> dict:
    """Time the affected launches (driver > 0) spent above the model's time without the cause: per affected
    step and over the run, with a 90 % interval (the recorded means' uncertainty; the affected launches are
    what they are). From a sample (`scale`): each call site's affected launches and their excess scaled by its
    launches per sampled launch, the affected steps by the steps per sampled step."""
    affected = np.isfinite(x) & (x > 0)
    total, var, count = 0.0, 0.0, 0.0
    for site, model in models.items():
        site_rows = members.get(site, np.zeros(0, np.int64))  # (keyed by the rows' own values, as `sites == site`)
        rows = site_rows[affected[site_rows]]
        if not len(rows):
            continue
        factor = scale.factor(site, len(site_rows)) if scale else 1.0
        mean0, sd0, k0 = at_value(model, 0.0)
        total += factor * float((d[rows] - mean0).sum())
        count += factor * float(len(rows))
        var += (factor * float(len(rows))) ** 2 * sd0**2 / max(k0, 1)  # the time without the cause is estimated
    affected_steps = len(np.unique(steps[affected])) if steps is not None and affected.any() else int(affected.sum())
    affected_launches = int(affected.sum())
    if scale is not None:
        affected_launches = round(count)
        sampled_steps = len(np.unique(steps[np.isfinite(steps)])) if steps is not None else 0
        if sampled_steps and affected.any() and scale.group_steps:
            affected_steps = min(round(affected_steps * scale.group_steps / sampled_steps), scale.group_steps)
        else:
            affected_steps = affected_launches
    run = Estimate(total, var)
    per_step = Estimate(total / max(affected_steps, 1), var / max(affected_steps, 1) ** 2)
    return {
        "affected_launches": affected_launches,
        "affected_steps": int(affected_steps),
        "over_the_run_ns": {"value": round(run.mean, 3), "interval": [round(v, 3) for v in run.interval()]},
        "per_affected_step_ns": {
            "value": round(per_step.mean, 3),
            "interval": [round(v, 3) for v in per_step.interval()],
        },
    }
