"""OpenTelemetry -> Prometheus names and units, as pure functions.

Follows the OpenTelemetry "Prometheus and OpenMetrics compatibility" specification, as
``opentelemetry-exporter-prometheus`` does: runs of characters outside ``[a-zA-Z0-9:]``
become ``_``; the unit is mapped (``By`` -> ``bytes``, ``s`` -> ``seconds``, ``J`` ->
``joules``, ``W`` -> ``watts``, ``Cel`` -> ``celsius``, ``Hz`` -> ``hertz``; ``X/Y`` ->
``X_per_Y``; UCUM annotations ``{...}`` dropped) and appended as a suffix unless the name
already ends with it; a gauge with unit ``1`` gets ``_ratio``; counters get ``_total`` on
their samples (the family name carries no ``_total``).

>>> prometheus_name("hw.energy", "J", "counter")
PrometheusName(family='hw_energy_joules', unit='joules', type='counter', sample='hw_energy_joules_total')
>>> prometheus_name("accel.device.mfu", "1", "gauge").family
'accel_device_mfu_ratio'
>>> prometheus_name("accel.device.flops.achieved", "{flop}/s", "gauge").family
'accel_device_flops_achieved_per_second'
>>> sanitize_label("accel.device.id")
'accel_device_id'
"""

from __future__ import annotations

import re
from typing import NamedTuple

__all__ = [
    "PrometheusName",
    "map_unit",
    "prometheus_name",
    "prometheus_type",
    "sanitize_label",
    "sanitize_name",
]

_SANITIZE_NAME_RE = re.compile(r"[^a-zA-Z0-9:]+|_{2,}")
_SANITIZE_LABEL_RE = re.compile(r"[^a-zA-Z0-9]+|_{2,}")
_UCUM_ANNOTATION = re.compile(r"\{[!-~]*?\}")

_UNITS = {
    "d": "days",
    "h": "hours",
    "min": "minutes",
    "s": "seconds",
    "ms": "milliseconds",
    "us": "microseconds",
    "ns": "nanoseconds",
    "By": "bytes",
    "KiBy": "kibibytes",
    "MiBy": "mebibytes",
    "GiBy": "gibibytes",
    "TiBy": "tibibytes",
    "KBy": "kilobytes",
    "MBy": "megabytes",
    "GBy": "gigabytes",
    "TBy": "terabytes",
    "m": "meters",
    "V": "volts",
    "A": "amperes",
    "J": "joules",
    "W": "watts",
    "g": "grams",
    "Cel": "celsius",
    "Hz": "hertz",
    "%": "percent",
}
_PER_UNITS = {
    "s": "second",
    "m": "minute",
    "h": "hour",
    "d": "day",
    "w": "week",
    "mo": "month",
    "y": "year",
}


class PrometheusName(NamedTuple):
    """How one OpenTelemetry metric appears in Prometheus.

    Attributes:
        family: the metric family name (OpenMetrics ``# TYPE`` name).
        unit: the OpenMetrics ``# UNIT`` (the suffix), ``""`` when none.
        type: ``counter``, ``gauge`` or ``histogram``.
        sample: the name of the value sample (``family`` plus ``_total`` for counters).
    """

    family: str
    unit: str
    type: str
    sample: str


def sanitize_name(name: str) -> str:
    """A valid Prometheus metric name: invalid runs become ``_``, a leading digit too.

    >>> sanitize_name("9lives.per-sec")
    '_lives_per_sec'
    """
    if name and name[0].isdigit():
        name = "_" + name[1:]
    return _SANITIZE_NAME_RE.sub("_", name)


def sanitize_label(key: str) -> str:
    """A valid Prometheus label name (no ``:`` allowed).

    >>> sanitize_label("network.io.direction")
    'network_io_direction'
    """
    if key and key[0].isdigit():
        key = "_" + key[1:]
    return _SANITIZE_LABEL_RE.sub("_", key)


def map_unit(unit: str, instrument: str = "gauge") -> str:
    """The Prometheus unit suffix of an OpenTelemetry (UCUM) unit; ``""`` for none.

    >>> [map_unit(u) for u in ("By", "By/s", "{flop}/By", "{cycle}", "Cel", "[ppm]")]
    ['bytes', 'bytes_per_second', 'per_bytes', '', 'celsius', 'ppm']
    >>> map_unit("1", "gauge"), map_unit("1", "counter")
    ('ratio', '')
    """
    unit = _UCUM_ANNOTATION.sub("", unit).strip()
    if unit == "1":
        return "ratio" if prometheus_type(instrument) == "gauge" else ""
    if unit in _UNITS:
        return _UNITS[unit]
    parts = unit.split("/", maxsplit=1)
    if len(parts) == 2:
        bottom = sanitize_name(parts[1]).strip("_")
        if bottom:
            top = sanitize_name(parts[0]).strip("_")
            top = _UNITS.get(top, top)
            bottom = _PER_UNITS.get(bottom, _UNITS.get(bottom, bottom))
            return f"{top}_per_{bottom}" if top else f"per_{bottom}"
    return sanitize_name(unit).strip("_")


def prometheus_type(instrument: str, *, monotonic: bool = True) -> str:
    """The Prometheus type of an OpenTelemetry instrument kind.

    >>> prometheus_type("updowncounter"), prometheus_type("counter"), prometheus_type("histogram")
    ('gauge', 'counter', 'histogram')
    """
    if instrument == "counter" and monotonic:
        return "counter"
    if instrument == "histogram":
        return "histogram"
    return "gauge"


def prometheus_name(
    name: str, unit: str, instrument: str, *, monotonic: bool = True
) -> PrometheusName:
    """Map an OpenTelemetry metric (name, unit, instrument) to its Prometheus naming.

    Args:
        name: the OpenTelemetry metric name.
        unit: its UCUM unit.
        instrument: ``counter``, ``updowncounter``, ``gauge`` or ``histogram``.
        monotonic: whether a ``counter`` is monotonic (a non-monotonic sum is a gauge).

    Returns:
        The :class:`PrometheusName`.

    >>> prometheus_name("accel.link.io", "By", "counter").sample
    'accel_link_io_bytes_total'
    >>> prometheus_name("requests.total", "", "counter").family
    'requests'
    """
    ptype = prometheus_type(instrument, monotonic=monotonic)
    base = sanitize_name(name).strip("_") or "_"
    if ptype == "counter" and base.endswith("_total"):
        base = base[: -len("_total")]
    suffix = map_unit(unit, instrument if ptype != "counter" else "counter")
    if suffix and not base.endswith("_" + suffix):
        base = f"{base}_{suffix}"
    sample = base + "_total" if ptype == "counter" else base
    return PrometheusName(base, suffix, ptype, sample)
