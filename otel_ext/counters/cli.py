"""``otel-ext exporter``: the node agent serving counters on ``/metrics`` (like dcgm-exporter).

``otel-ext exporter [--source nvml|host|infiniband|net|sim ...] --listen HOST:PORT
[--interval SECONDS] [--otlp] [--tls-cert FILE --tls-key FILE] [--basic-auth USER:PASS|FILE]
[--active-span-dir DIR ...]``

Without ``--source`` the agent serves what the machine has: NVML when a driver answers,
InfiniBand/RoCE when sysfs has ports, Ethernet/RoCE interfaces when ``/sys/class/net`` has a
physical one (``--net-virtual``: virtual ones too), and the host source always; it prints
what it serves and why the others are not. The simulated source runs only when asked (``--source sim``)
and is labelled ``accel_device_kind="sim"`` in ``target_info``.

Exemplars: the agent reads the active-span records that workloads on this host publish
(``OTEL_EXT_ACTIVE_SPAN_DIR`` or the default folders; ``--active-span-dir``) and attaches to
device D's counters and histogram buckets the span that ran for most of each sampling
interval on D.

Binds ``127.0.0.1`` unless told otherwise; serves ``/metrics`` and ``/healthz`` until
SIGTERM or SIGINT, then shuts down cleanly (stops sampling, closes the sources, flushes
OTLP). A source that cannot start is skipped with a warning when another works; when none
works the command fails with one line (exit status 1).
"""

from __future__ import annotations

import argparse
import logging
import signal
import sys
import threading
from collections.abc import Callable, Sequence
from typing import Any

from otel_ext import config
from otel_ext.errors import ConfigError

__all__ = ["SOURCES", "add_arguments", "build_sources", "run"]

_log = logging.getLogger("otel_ext.counters")
SOURCES = ("nvml", "host", "infiniband", "net", "sim")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Declare the ``exporter`` options."""
    parser.add_argument(
        "--source",
        action="append",
        choices=SOURCES,
        dest="sources",
        help="counter source (repeat for several; default: what this machine has: "
        "nvml, infiniband, net when present, host always)",
    )
    _add_serving_arguments(parser)
    _add_source_arguments(parser)
    _add_workload_arguments(parser)


def _add_serving_arguments(parser: argparse.ArgumentParser) -> None:
    """Where and how often to serve: listen address, interval, rate window, OTLP, TLS, auth."""
    parser.add_argument(
        "--listen",
        default=None,
        help="HOST:PORT to serve on (default OTEL_EXT_PROMETHEUS_LISTEN, 127.0.0.1:9464)",
    )
    parser.add_argument(
        "--interval",
        type=float,
        default=None,
        help="seconds between samples (default OTEL_EXT_COUNTER_INTERVAL_S, 1)",
    )
    parser.add_argument(
        "--window",
        type=float,
        default=None,
        help="rate window in seconds for derived metrics (default: one interval)",
    )
    parser.add_argument(
        "--otlp",
        action="store_true",
        help="also export the samples over OTLP (standard OTEL_EXPORTER_OTLP_* settings)",
    )
    parser.add_argument("--tls-cert", default=None, help="PEM certificate: serve HTTPS")
    parser.add_argument("--tls-key", default=None, help="PEM private key of --tls-cert")
    parser.add_argument(
        "--basic-auth", default=None, help="USER:PASS, or a file holding it, required on /metrics"
    )


def _add_source_arguments(parser: argparse.ArgumentParser) -> None:
    """The sources' settings: the workload pid, sysfs and /proc roots, interfaces, the
    built-in simulated model, the host id."""
    parser.add_argument(
        "--pid", type=int, default=None, help="workload pid for per-process CPU (host source)"
    )
    parser.add_argument("--proc-root", default="/proc", help="/proc root (host source)")
    parser.add_argument(
        "--sysfs-root", default="/sys/class/infiniband", help="InfiniBand sysfs root"
    )
    parser.add_argument(
        "--net-sysfs-root", default="/sys/class/net", help="network interfaces' sysfs root"
    )
    parser.add_argument(
        "--net-virtual",
        action="store_true",
        help="also read virtual interfaces (veth, bridges, tun; the loopback never)",
    )
    parser.add_argument(
        "--net-interface",
        action="append",
        default=None,
        dest="net_interfaces",
        help="read only this interface (a name or shell pattern; repeat for several)",
    )
    parser.add_argument(
        "--sim-chips", type=int, default=8, help="chips of the built-in simulated model"
    )
    parser.add_argument(
        "--sim-constant",
        action="store_true",
        help="built-in simulated model with constant rates (known derived values)",
    )
    parser.add_argument("--host-id", default=None, help="accel.host.id (default: the host name)")


def _add_workload_arguments(parser: argparse.ArgumentParser) -> None:
    """What ties counters to workloads: pod labels, active-span records, collectives in
    flight."""
    parser.add_argument(
        "--pod-labels",
        choices=("dcgm", "k8s", "none"),
        default="dcgm",
        help="label each device's series with the pod on it: dcgm (pod, namespace, container, "
        "as dcgm-exporter), k8s (k8s_pod_name, k8s_namespace_name, k8s_container_name) or "
        "none (default dcgm; docs/counters.md)",
    )
    parser.add_argument(
        "--pod-resources-socket",
        default=None,
        help="the kubelet's PodResources socket (default "
        "/var/lib/kubelet/pod-resources/kubelet.sock; read when it exists)",
    )
    parser.add_argument(
        "--active-span-dir",
        action="append",
        default=None,
        dest="active_span_dirs",
        help="folder of the workloads' active-span records (repeat for several; default "
        "OTEL_EXT_ACTIVE_SPAN_DIR, else the default folders)",
    )
    parser.add_argument(
        "--collective-pending-min",
        type=float,
        default=1.0,
        metavar="SECONDS",
        help="export a collective in flight (accel.collective.pending.duration) once it has "
        "waited this long (default 1)",
    )


AUTO_SOURCES = ("nvml", "infiniband", "net", "host")


def build_sources(args: argparse.Namespace) -> list[Any]:
    """The sources named on the command line (not opened)."""
    from otel_ext.counters import (
        BuiltinSimModel,
        HostSource,
        InfinibandSource,
        NetDevSource,
        NvmlSource,
        SimulatedSource,
    )

    out: list[Any] = []
    for name in dict.fromkeys(args.sources or AUTO_SOURCES):
        if name == "nvml":
            out.append(NvmlSource(host=args.host_id))
        elif name == "host":
            out.append(HostSource(proc_root=args.proc_root, pid=args.pid, host=args.host_id))
        elif name == "infiniband":
            out.append(InfinibandSource(root=args.sysfs_root, host=args.host_id))
        elif name == "net":
            out.append(
                NetDevSource(
                    root=args.net_sysfs_root,
                    host=args.host_id,
                    include_virtual=args.net_virtual,
                    interfaces=args.net_interfaces,
                )
            )
        else:
            model = BuiltinSimModel(
                chips=args.sim_chips, host=args.host_id or "host0", varying=not args.sim_constant
            )
            out.append(SimulatedSource(model))
    return out


def pod_labeller(
    args: argparse.Namespace, reader: Any, sources: Callable[[], Sequence[Any]]
) -> Any:
    """The bridge's pod labeller for ``--pod-labels`` (``None`` for ``none``): the records
    of ``reader``, the PodResources socket, the process lists of the ``sources`` that have
    them (NVML)."""
    from otel_ext.counters import PodAttributor, PodResourcesClient
    from otel_ext.counters._podresources import DEFAULT_SOCKET

    if args.pod_labels == "none":
        return None

    def processes() -> dict[str, list[int]]:
        out: dict[str, list[int]] = {}
        for src in sources():
            if hasattr(src, "device_pids") and getattr(src, "devices", None):
                out.update(src.device_pids())
        return out

    def mig_parents() -> dict[str, str]:
        out: dict[str, str] = {}
        for src in sources():
            if hasattr(src, "mig_parents") and getattr(src, "devices", None):
                out.update(src.mig_parents())
        return out

    interval = config.resolve(config.COUNTER_INTERVAL_S, args.interval)
    return PodAttributor(
        records=reader,
        pod_resources=PodResourcesClient(args.pod_resources_socket or DEFAULT_SOCKET),
        processes=processes,
        proc_root=args.proc_root,
        style=args.pod_labels,
        hold_s=2 * interval,
        mig_parents=mig_parents,
    )


def run(args: argparse.Namespace) -> int:
    """Run the daemon until SIGTERM/SIGINT; return the exit status.

    Raises:
        ConfigError: bad listen address, TLS files or basic-auth value.
        SourceUnavailableError: no source could start.
    """
    from otel_ext.counters import CounterCollector, TargetInfoCollector
    from otel_ext.exporters.prometheus import PrometheusExpositionServer

    logging.basicConfig(level=logging.INFO, format="otel-ext exporter: %(message)s")
    host, port, auth = _serving_settings(args)
    reader, span_dirs = _active_span_reader(args)
    bridge, started = _open_bridge(args, reader, span_dirs)
    telemetry = _otlp_bridge(bridge) if args.otlp else None
    bridge.sample_once()
    target = TargetInfoCollector(host_id=config.host_id(args.host_id), sources=started)
    server = PrometheusExpositionServer(
        [target, CounterCollector(bridge)],
        host=host,
        port=port,
        certfile=args.tls_cert,
        keyfile=args.tls_key,
        basic_auth=auth,
        health=bridge.health,
    )
    try:
        bound = server.start()
    except ConfigError:
        bridge.stop()
        raise
    stop = threading.Event()

    def _on_signal(signum: int, frame: Any) -> None:
        stop.set()

    previous = {s: signal.signal(s, _on_signal) for s in (signal.SIGTERM, signal.SIGINT)}
    bridge.start()
    _announce(args, server.scheme, bound, bridge, started, reader)
    try:
        while not stop.wait(3600):
            pass
    finally:
        server.stop()
        bridge.stop()
        reader.close()
        if telemetry is not None:
            telemetry.shutdown()
        for s, h in previous.items():
            signal.signal(s, h)
    print("otel-ext exporter: stopped", file=sys.stderr, flush=True)
    return 0


def _serving_settings(args: argparse.Namespace) -> tuple[str, int, Any]:
    """The listen host and port and the basic-auth credentials, checked with the TLS pair
    and the interval.

    Raises:
        ConfigError: a bad listen address, a TLS file without its pair, a non-positive
            interval or a bad basic-auth value.
    """
    from otel_ext.exporters.prometheus import parse_basic_auth, parse_listen

    host, port = parse_listen(config.resolve(config.PROMETHEUS_LISTEN, args.listen))
    if bool(args.tls_cert) != bool(args.tls_key):
        raise ConfigError("--tls-cert and --tls-key go together")
    if args.interval is not None and args.interval <= 0:
        raise ConfigError("--interval must be positive")
    auth = parse_basic_auth(args.basic_auth) if args.basic_auth else None
    return host, port, auth


def _active_span_reader(args: argparse.Namespace) -> tuple[Any, list[Any]]:
    """The reader of the workloads' active-span records (``--active-span-dir``, else the
    default folders, discovered as they appear), and those folders."""
    from otel_ext.counters import SharedActiveSpanReader

    span_dirs = args.active_span_dirs or SharedActiveSpanReader.default_directories()
    reader = SharedActiveSpanReader(
        span_dirs[0],
        extra_directories=span_dirs[1:],
        discover=None if args.active_span_dirs else SharedActiveSpanReader.default_directories,
    )
    return reader, span_dirs


def _open_bridge(
    args: argparse.Namespace, reader: Any, span_dirs: list[Any]
) -> tuple[Any, list[str]]:
    """The counter bridge over the asked (or detected) sources and the workloads'
    collectives in flight, opened; the names of the sources that started.

    Raises:
        SourceUnavailableError: no counter source could start.
    """
    from otel_ext.counters import (
        ActiveSpanRegistry,
        CollectiveStateSource,
        CounterBridge,
        SharedActiveSpanReader,
    )
    from otel_ext.errors import SourceUnavailableError

    # collectives in flight: always read, from the same folders as the spans
    collectives = CollectiveStateSource(
        span_dirs,
        min_pending_s=args.collective_pending_min,
        discover=None if args.active_span_dirs else SharedActiveSpanReader.default_directories,
    )
    bridge = CounterBridge(
        [*build_sources(args), collectives],
        interval_s=args.interval,
        window_s=args.window,
        active_spans=ActiveSpanRegistry(use_current_context=False, shared=reader),
        labeller=pod_labeller(args, reader, lambda: bridge.sources),
    )
    # the workloads' collective records are no counter source of this host: not listed
    started = [name for name in bridge.open(quiet=not args.sources) if name != collectives.name]
    if not started:
        bridge.stop()
        reasons = "; ".join(f"{name}: {why}" for name, why in bridge.unavailable.items())
        raise SourceUnavailableError(f"no counter source could start ({reasons})")
    for src in bridge.sources:
        if src.name in started and hasattr(src, "device_uuids"):
            reader.device_uuids.update(src.device_uuids())
    return bridge, started


def _otlp_bridge(bridge: Any) -> Any:
    """``--otlp``: the samples also exported over OTLP; the telemetry handle to shut down.

    The standard ``OTEL_*`` settings (gRPC unless ``OTEL_EXPORTER_OTLP_PROTOCOL`` says
    otherwise), with ``configure()``'s guards: one line and counted drops when no collector
    answers, a bounded shutdown.
    """
    import os

    from otel_ext.counters import OtlpCounterBridge
    from otel_ext.exporters import configure

    telemetry = configure(
        service_name="otel-ext-exporter",
        traces_exporter="none",
        metrics_exporter="otlp",
        protocol=None if os.environ.get("OTEL_EXPORTER_OTLP_PROTOCOL", "").strip() else "grpc",
        publish_active_spans=False,
        set_global=False,
    )
    OtlpCounterBridge(bridge, meter_provider=telemetry.meter_provider)
    return telemetry


def _announce(
    args: argparse.Namespace,
    scheme: str,
    bound: tuple[str, int],
    bridge: Any,
    started: list[str],
    reader: Any,
) -> None:
    """One line on stderr: the URL served, the sources (detected or asked, simulated), the
    ones missing and why, the interval, the folders of the workloads' records."""
    how = "detected" if not args.sources else "asked"
    if "sim" in started:
        how += ", SIMULATED counters"
    missing = "".join(f"; {name}: {why}" for name, why in bridge.unavailable.items())
    print(
        f"otel-ext exporter: serving {scheme}://{bound[0]}:{bound[1]}/metrics "
        f"(sources: {', '.join(started)} ({how}){missing}; every {bridge.interval_s:g}s; "
        f"active spans and collectives in flight from {', '.join(map(str, reader.directories))})",
        file=sys.stderr,
        flush=True,
    )
