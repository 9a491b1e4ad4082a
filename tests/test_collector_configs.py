"""Every Collector configuration in collector/ (files, and those inside Kubernetes ConfigMaps)
must be well-formed: pipelines reference defined components, component names are the
current ones, and tail-sampling policies use attributes our semantic-convention registry
defines, with values it allows."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from otel_safety import semconv as sc

ROOT = Path(__file__).resolve().parent.parent
COLLECTOR = ROOT / "collector"
SECTIONS = ("receivers", "processors", "exporters", "connectors", "extensions")
# Component types these configs may use, by their current names.
CURRENT = {
    "receivers": {"otlp"},
    "processors": {"memory_limiter", "batch", "tail_sampling"},
    "exporters": {"otlp_grpc", "otlp_http", "load_balancing", "debug"},
}
# Deprecated aliases that must not appear.
DEPRECATED = {"otlphttp", "loadbalancing", "logging"}


def documents() -> list[tuple[str, Any]]:
    found = []
    for path in sorted(COLLECTOR.rglob("*.yaml")):
        for index, document in enumerate(yaml.safe_load_all(path.read_text(encoding="utf-8"))):
            found.append((f"{path.relative_to(ROOT)}#{index}", document))
    return found


def collector_configs() -> list[tuple[str, dict[str, Any]]]:
    """Top-level Collector files, plus the configs embedded in Kubernetes ConfigMaps."""
    configs = []
    for where, document in documents():
        if (
            isinstance(document, dict)
            and "service" in document
            and "pipelines" in document["service"]
        ):
            configs.append((where, document))
        elif isinstance(document, dict) and document.get("kind") == "ConfigMap":
            for key, text in (document.get("data") or {}).items():
                embedded = yaml.safe_load(text)
                if isinstance(embedded, dict) and "service" in embedded:
                    configs.append((f"{where}:{document['metadata']['name']}/{key}", embedded))
    return configs


CONFIGS = collector_configs()


def registry() -> dict[str, str]:
    """Attribute id -> type, from the Weaver YAML registry."""
    attributes = {}
    for path in (ROOT / "semconv" / "registry").glob("*.yaml"):
        for group in yaml.safe_load(path.read_text(encoding="utf-8")).get("groups", []):
            for attribute in group.get("attributes", []):
                if "id" in attribute:
                    attributes[attribute["id"]] = attribute.get("type")
    return attributes


def component_type(component_id: str) -> str:
    return component_id.split("/", 1)[0]


def test_there_are_configs_for_each_role():
    names = {where.split("#")[0] for where, _ in CONFIGS}
    assert {
        "collector/sidecar.yaml",
        "collector/scale-out/agent-static.yaml",
        "collector/scale-out/agent-dns.yaml",
        "collector/scale-out/agent-k8s.yaml",
        "collector/scale-out/gateway.yaml",
        "collector/kubernetes/sidecar-pod.yaml",
        "collector/kubernetes/scale-out.yaml",
    } <= names


@pytest.mark.parametrize(("where", "config"), CONFIGS, ids=[where for where, _ in CONFIGS])
def test_pipelines_reference_defined_components_by_current_names(where, config):
    defined = {section: set(config.get(section) or {}) for section in SECTIONS}
    used: dict[str, set[str]] = {section: set() for section in SECTIONS}
    for name, pipeline in config["service"]["pipelines"].items():
        assert name.split("/")[0] in ("traces", "metrics", "logs"), name
        assert pipeline.get("receivers") and pipeline.get("exporters"), f"{name} is incomplete"
        for section in ("receivers", "processors", "exporters"):
            for component in pipeline.get(section) or []:
                assert component in defined[section], f"{where}: {name} uses undefined {component}"
                used[section].add(component)
        processors = pipeline.get("processors") or []
        if "memory_limiter" in processors:
            assert processors[0] == "memory_limiter", f"{where}: memory_limiter must come first"
    for section in ("receivers", "processors", "exporters"):
        assert defined[section] == used[section], f"{where}: unused {section}"
        for component in defined[section]:
            kind = component_type(component)
            assert kind not in DEPRECATED, f"{where}: {component} uses a deprecated name"
            assert kind in CURRENT[section], f"{where}: unexpected {section[:-1]} {component}"
    if "otlp" in {component_type(c) for c in defined["exporters"]}:
        pytest.fail(f"{where}: the gRPC exporter is `otlp_grpc` now")


@pytest.mark.parametrize(("where", "config"), CONFIGS, ids=[where for where, _ in CONFIGS])
def test_a_sidecar_sends_log_records_both_ways_as_it_sends_spans(where, config):
    """Content sent as GenAI log events must reach otel-safety with its spans, and the
    findings' log records must come back: a traces-only path judged such calls without
    content and refused every findings export."""
    pipelines = config["service"]["pipelines"]
    for signal in ("traces", "logs"):
        routes = {
            (receiver, exporter)
            for name, pipeline in pipelines.items()
            if name.split("/")[0] == signal
            for receiver in pipeline["receivers"]
            for exporter in pipeline["exporters"]
        }
        if "otlp/annotated" in (config.get("receivers") or {}):
            assert ("otlp", "otlp_grpc/otel-safety") in routes, f"{where}: {signal} in"
            assert ("otlp/annotated", "otlp_grpc/backend") in routes, f"{where}: {signal} back"


@pytest.mark.parametrize(("where", "config"), CONFIGS, ids=[where for where, _ in CONFIGS])
def test_load_balancing_routes_whole_traces(where, config):
    for component, settings in (config.get("exporters") or {}).items():
        if component_type(component) != "load_balancing":
            continue
        assert settings["routing_key"] == "traceID"
        resolver = settings["resolver"]
        assert len(resolver) == 1 and next(iter(resolver)) in ("static", "dns", "k8s")
        assert "endpoint" not in settings["protocol"]["otlp"]  # set per backend by the exporter


def policies(config: dict[str, Any]) -> list[dict[str, Any]]:
    """Every tail-sampling policy, including those nested in `and` / `composite` policies."""
    found = []
    for component, settings in (config.get("processors") or {}).items():
        if component_type(component) == "tail_sampling":
            stack = list(settings["policies"])
            while stack:
                policy = stack.pop()
                found.append(policy)
                for nested in ("and", "composite"):
                    if nested in policy:
                        stack.extend(policy[nested].get(f"{nested}_sub_policy", []))
    return found


def test_tail_sampling_uses_registry_attributes_with_allowed_values():
    attributes = registry()
    levels = set(sc.TRACE_ESCALATION_LEVELS)
    checked = 0
    for where, config in CONFIGS:
        for policy in policies(config):
            kind = policy["type"]
            if kind == "numeric_attribute":
                key = policy["numeric_attribute"]["key"]
                assert attributes.get(key) == "int", f"{where}: {key} is not an int attribute"
                low, high = (
                    policy["numeric_attribute"]["min_value"],
                    policy["numeric_attribute"]["max_value"],
                )
                assert 0 <= low <= high <= len(levels) - 1
                checked += 1
            elif kind == "string_attribute":
                key = policy["string_attribute"]["key"]
                assert key in attributes, f"{where}: {key} is not in the registry"
                if key.endswith("escalation.level"):
                    assert set(policy["string_attribute"]["values"]) <= levels
                checked += 1
    assert checked >= 2  # the gateway keeps escalated traces by rank and by name
    assert sc.OTEL_SAFETY_TRACE_ESCALATION_RANK in attributes


def test_kubernetes_resolver_names_a_headless_service_in_the_manifest():
    services = {
        (doc["metadata"]["name"], doc["metadata"].get("namespace", "default")): doc
        for _, doc in documents()
        if isinstance(doc, dict) and doc.get("kind") == "Service"
    }
    for where, config in CONFIGS:
        for settings in (config.get("exporters") or {}).values():
            k8s = settings.get("resolver", {}).get("k8s") if isinstance(settings, dict) else None
            if k8s is None:
                continue
            name, _, namespace = k8s["service"].partition(".")
            service = services[(name, namespace or "default")]
            assert service["spec"]["clusterIP"] == "None", f"{where}: {name} is not headless"
            assert set(k8s["ports"]) <= {port["port"] for port in service["spec"]["ports"]}


def test_configmaps_carry_the_same_configs_as_the_files():
    files = {where.split("#")[0]: config for where, config in CONFIGS if where.count(":") == 0}
    embedded = [(where, config) for where, config in CONFIGS if ":" in where]
    assert embedded
    for where, config in embedded:
        assert config in files.values(), f"{where} drifted from the files in collector/"


def test_compose_mounts_existing_configs_and_runs_serve():
    compose = yaml.safe_load((COLLECTOR / "compose.yaml").read_text(encoding="utf-8"))
    for name, service in compose["services"].items():
        for volume in service.get("volumes", []):
            source = volume.split(":", 1)[0]
            if source.startswith("./"):
                assert (COLLECTOR / source).is_file(), f"{name} mounts a missing {source}"
    assert compose["services"]["otel-safety"]["command"][0] == "serve"
    assert (ROOT / compose["services"]["otel-safety"]["build"]["dockerfile"]).is_file()


def serve_containers() -> list[tuple[str, dict[str, Any]]]:
    """Every container of the Kubernetes manifests that runs `otel-safety serve`."""
    found = []
    for where, document in documents():
        spec = ((document or {}).get("spec") or {}).get("template", {}).get("spec") or (
            (document or {}).get("spec") if (document or {}).get("kind") == "Pod" else None
        )
        for container in (spec or {}).get("containers", []):
            if (container.get("args") or [None])[0] == "serve":
                found.append((f"{where}:{container['name']}", container))
    return found


def test_serve_in_a_manifest_takes_its_arguments_and_its_probes_reach_it():
    """The sidecar pod probed /health over the pod IP while serve listened on 127.0.0.1
    only: readiness never passed and liveness restarted it."""
    from otel_safety.commands.main import build_parser

    containers = serve_containers()
    assert len(containers) >= 2
    for where, container in containers:
        args = build_parser("serve").parse_args(container["args"])
        loopback = args.host in (None, "127.0.0.1", "localhost", "::1")  # None: the default
        for probe in ("startupProbe", "readinessProbe", "livenessProbe"):
            if probe in container and "httpGet" in container[probe]:
                assert not loopback, f"{where}: {probe} over the pod IP, serve on {args.host}"


def test_every_serve_in_a_manifest_keeps_what_it_acknowledged_on_disk():
    """The scale-out configs wrote a lake with no spool: a restart lost what was
    acknowledged and not yet written, and what the gateway had not taken."""
    from otel_safety.commands.main import build_parser

    compose = yaml.safe_load((COLLECTOR / "compose.yaml").read_text(encoding="utf-8"))
    runs = [(f"compose:{name}", s["command"]) for name, s in compose["services"].items()
            if (s.get("command") or [None])[0] == "serve"]  # fmt: skip
    runs += [(where, container["args"]) for where, container in serve_containers()]
    for where, command in runs:
        args = build_parser("serve").parse_args(command)
        if args.lake:
            assert args.spool not in (None, "off"), f"{where}: a lake with no spool"
        if args.forward:
            assert args.forward_spool != "off", f"{where}"
