"""The read API from Python: `Client(url, token)` gives the published collections, a window's estimates, a
series as a pandas DataFrame, one row per window and estimate, which it can write as Parquet, and a numeric
attribute's distribution as a DataFrame, one row per bin of its grid, with its quantiles.

    >>> from ldpstream import Client
    >>> client = Client("http://127.0.0.1:8000", token)                  # doctest: +SKIP
    >>> frame = client.series("diagnostics", "battery_level", window="1h", start="2024-05-01")  # doctest: +SKIP
    >>> client.save_series("battery.parquet", "diagnostics", "battery_level")                  # doctest: +SKIP
    >>> bins = client.distribution("request_latency", "request_ms", quantiles=[0.5, 0.9, 0.99])  # doctest: +SKIP
    >>> quantile_frame(bins)                                                                   # doctest: +SKIP

Only the standard library is needed to talk to the API (`series_document`, `series_rows`, `distribution_document`);
pandas and pyarrow, for DataFrames and Parquet, are the `client` extra (`pip install 'ldpstream[client]'`) and are
imported when used.
"""

from __future__ import annotations

import importlib
import json
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Sequence
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import pandas as pd

Time = datetime | int | str  # a datetime (naive: UTC), milliseconds since the epoch, or ISO 8601 text
COLUMNS = ("start", "end", "reports", "sampled", "epsilon", "central_epsilon", "central_delta", "group", "label",
           "estimate", "stderr", "low", "high")
METADATA = ("collection", "version", "attribute", "type", "mechanism", "description", "unit", "window", "window_ms",
            "from_ms", "to_ms", "confidence")
DISTRIBUTION_COLUMNS = ("lower", "upper", "density", "probability", "cdf", "cdf_stderr")
DISTRIBUTION_METADATA = ("collection", "version", "attribute", "window", "window_start_ms")


CLIENT_INSTALL = "pip install 'ldpstream[client]'"


def needs(module: str) -> Any:
    """`module` (pandas, pyarrow) imported; a ModuleNotFoundError that says which install brings it otherwise."""
    try:
        return importlib.import_module(module)
    except ModuleNotFoundError as exc:
        if exc.name != module:
            raise
        raise ModuleNotFoundError(f"No module named {module!r}: DataFrames and Parquet come with the client "
                                  f"install: {CLIENT_INSTALL}", name=module) from exc


class ClientError(Exception):
    """The API refused a request (`status`: its HTTP status; the message: its error) or could not be reached
    (`status` None)."""

    def __init__(self, status: int | None, message: str) -> None:
        super().__init__(message if status is None else f"{status}: {message}")
        self.status = status


def time_parameter(value: Time) -> str:
    """A `from`/`to` parameter: milliseconds since the epoch as digits, or ISO 8601 text as it is."""
    if isinstance(value, datetime):
        if value.tzinfo is None:
            return value.isoformat()
        return str(int(value.timestamp() * 1000))
    if isinstance(value, int):
        return str(value)
    return value


def level_parameter(level: float) -> str:
    """A quantile level as the API reads it: plain decimal digits, no exponent (1e-05 is 0.00001)."""
    text = f"{float(level):.15f}".rstrip("0")
    return text + "0" if text.endswith(".") else text


def series_rows(document: dict[str, Any]) -> list[dict[str, Any]]:
    """A series document (`GET /collections/{name}/series`) as flat rows, one per window and estimate, with COLUMNS
    (start and end in ms since the epoch; group: mean, frequencies, means or answers; label: the value, key or query,
    "mean" for a numeric attribute's mean)."""
    rows = []
    for window in document["windows"]:
        central = window["privacy"]["central"] or {}
        common = {"start": window["start_ms"], "end": window["end_ms"], "reports": window["reports"],
                  "sampled": window["sampled"], "epsilon": window["privacy"]["epsilon"],
                  "central_epsilon": central.get("epsilon"), "central_delta": central.get("delta")}
        for group, points in window["estimates"].items():
            labelled = {"mean": points} if group == "mean" else points
            for label, point in labelled.items():
                rows.append({**common, "group": group, "label": label, "estimate": point["estimate"],
                             "stderr": point["stderr"], "low": point["low"], "high": point["high"]})
    return rows


class Client:
    """The read API at `url` (e.g. http://127.0.0.1:8000, what `ldp serve` listens on) with a bearer token of scope
    `read` (`ldp tokens create --scope read`)."""

    def __init__(self, url: str, token: str, timeout_s: float = 30.0) -> None:
        parts = urllib.parse.urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.netloc:
            raise ValueError(f"the API's url is http(s)://host[:port], not {url!r}")
        if not token or any(c.isspace() for c in token):
            raise ValueError("the token is the text `ldp tokens create` printed, without spaces")
        self.url = url.rstrip("/")
        self.token = token
        self.timeout_s = timeout_s

    def get(self, path: str, params: dict[str, str | None] | None = None) -> Any:
        """The JSON answer to GET `path` with the query `params` (those set); ClientError if refused or unreachable."""
        query = urllib.parse.urlencode({k: v for k, v in (params or {}).items() if v is not None})
        request = urllib.request.Request(f"{self.url}{path}{'?' + query if query else ''}",
                                         headers={"Authorization": f"Bearer {self.token}",
                                                  "Accept": "application/json"})
        try:
            with urllib.request.urlopen(request, timeout=self.timeout_s) as response:
                return json.load(response)
        except urllib.error.HTTPError as exc:
            try:
                message = json.load(exc).get("error", exc.reason)
            except (ValueError, AttributeError):
                message = exc.reason
            raise ClientError(exc.code, str(message)) from None
        except (urllib.error.URLError, OSError) as exc:
            raise ClientError(None, f"cannot reach {self.url}: {getattr(exc, 'reason', exc)}") from exc

    def collections(self) -> list[dict[str, Any]]:
        """Every published collection: versions, attributes, windows, report counts, privacy budgets."""
        return list(self.get("/collections")["collections"])

    def estimates(self, name: str, window: str = "all", version: int | None = None,
                  postprocess: str = "none") -> dict[str, Any]:
        """One window's estimates of every attribute, with standard errors (`GET /collections/{name}/estimates`)."""
        return dict(self.get(f"/collections/{urllib.parse.quote(name, safe='')}/estimates",
                             {"window": window, "postprocess": postprocess,
                              "version": None if version is None else str(version)}))

    def distribution_document(self, name: str, attribute: str, window: str = "all",
                              quantiles: Sequence[float] | None = None,
                              version: int | None = None) -> dict[str, Any]:
        """One numeric attribute's distribution as the API answers it (`GET /collections/{name}/distribution`):
        grid, density, CDF and quantiles with standard errors ("distribution" null while no device reported it)."""
        return dict(self.get(f"/collections/{urllib.parse.quote(name, safe='')}/distribution", {
            "attribute": attribute, "window": window, "version": None if version is None else str(version),
            "quantiles": None if quantiles is None else ",".join(level_parameter(q) for q in quantiles)}))

    def distribution(self, name: str, attribute: str, window: str = "all", quantiles: Sequence[float] | None = None,
                     version: int | None = None) -> pd.DataFrame:
        """A numeric attribute's estimated distribution in a window (`window`: all, a length of the spec such as 1h
        for its newest window with data, or 1h:<start ms>) as a DataFrame, one row per bin of its grid, on the
        attribute's own scale: DISTRIBUTION_COLUMNS, the bin's `lower` and `upper` edges, its `density` (per unit of
        the attribute), its `probability` (mass), and the CDF at its upper edge with its standard error (`cdf`,
        `cdf_stderr`). Estimates are unbiased, so a density or mass may be slightly negative.

        The quantiles at `quantiles` (levels in (0, 1); default the API's: 0.01, 0.05, 0.25, 0.5, 0.75, 0.95, 0.99)
        are in `frame.attrs["quantiles"]`, a list of {"level", "estimate", "stderr"} (`quantile_frame(frame)` makes
        it a DataFrame indexed by level); `frame.attrs` also holds DISTRIBUTION_METADATA, "method", "reports",
        "mean" and "mean_stderr" (the distribution's), and "stderr_method". While no device has reported the
        attribute in the window, the frame has no rows, "quantiles" is empty and "reports" is 0. ClientError (400)
        for an attribute that is not numeric or whose mechanism gives its mean only (no `mechanism: sw` or `hh`).
        """
        return distribution_frame(self.distribution_document(name, attribute, window, quantiles, version))

    def series_document(self, name: str, attribute: str | None = None, window: str | None = None,
                        start: Time | None = None, end: Time | None = None,
                        version: int | None = None) -> dict[str, Any]:
        """The series as the API answers it: the windows whose start lies in [start, end) (default: the 48 newest
        windows), each with its estimates, standard errors, 95% intervals, reports and privacy figures."""
        return dict(self.get(f"/collections/{urllib.parse.quote(name, safe='')}/series", {
            "attribute": attribute, "window": window, "version": None if version is None else str(version),
            "from": None if start is None else time_parameter(start),
            "to": None if end is None else time_parameter(end)}))

    def series(self, name: str, attribute: str | None = None, window: str | None = None,
               start: Time | None = None, end: Time | None = None, version: int | None = None) -> pd.DataFrame:
        """The series as a DataFrame: one row per window and estimate, COLUMNS with start and end as UTC
        timestamps; the document's METADATA in `frame.attrs` (kept in Parquet)."""
        return series_frame(self.series_document(name, attribute, window, start, end, version))

    def save_series(self, path: str | Path, name: str, attribute: str | None = None, window: str | None = None,
                    start: Time | None = None, end: Time | None = None, version: int | None = None) -> pd.DataFrame:
        """Write the series to a Parquet file at `path` (with its metadata); returns the DataFrame written."""
        needs("pyarrow")
        frame = self.series(name, attribute, window, start, end, version)
        frame.to_parquet(path, engine="pyarrow", index=False)
        return frame


def series_frame(document: dict[str, Any]) -> pd.DataFrame:
    """A series document as a DataFrame (`Client.series`)."""
    pd = needs("pandas")
    frame = pd.DataFrame(series_rows(document), columns=list(COLUMNS))
    for column in ("start", "end"):
        frame[column] = pd.to_datetime(frame[column].astype("int64"), unit="ms", utc=True)
    for column in ("estimate", "stderr", "low", "high", "central_epsilon", "central_delta", "epsilon"):
        frame[column] = frame[column].astype("float64")
    frame.attrs = {key: document[key] for key in METADATA}
    return frame


def distribution_frame(document: dict[str, Any]) -> pd.DataFrame:
    """A distribution document (`GET /collections/{name}/distribution`) as a DataFrame (`Client.distribution`)."""
    pd = needs("pandas")
    dist = document["distribution"]
    if dist is None:
        frame = pd.DataFrame({c: pd.Series(dtype="float64") for c in DISTRIBUTION_COLUMNS})
        extra: dict[str, Any] = {"method": None, "reports": 0, "mean": None, "mean_stderr": None,
                                 "stderr_method": None, "quantiles": []}
    else:
        grid = dist["grid"]
        frame = pd.DataFrame({"lower": grid[:-1], "upper": grid[1:], "density": dist["density"],
                              "probability": dist["probabilities"], "cdf": dist["cdf"][1:],
                              "cdf_stderr": dist["cdf_stderr"][1:]}, columns=list(DISTRIBUTION_COLUMNS))
        frame = frame.astype("float64")  # null (non-finite) is NaN
        extra = {"method": dist["method"], "reports": dist["reports"], "mean": dist["mean"]["estimate"],
                 "mean_stderr": dist["mean"]["stderr"], "stderr_method": dist["stderr_method"],
                 "quantiles": [{"level": float(level), "estimate": q["estimate"], "stderr": q["stderr"]}
                               for level, q in dist["quantiles"].items()]}
    frame.attrs = {**{key: document[key] for key in DISTRIBUTION_METADATA}, **extra}
    return frame


def quantile_frame(frame: pd.DataFrame) -> pd.DataFrame:
    """The quantiles of a `Client.distribution` frame as a DataFrame indexed by level, columns estimate and stderr
    (NaN where the API gave null: an infinite standard error where the density is 0)."""
    pd = needs("pandas")
    rows = frame.attrs.get("quantiles", [])
    return pd.DataFrame(rows, columns=["level", "estimate", "stderr"]).astype("float64").set_index("level")
