"""Pure parts of issue 4: the regatta.toml manifest, metadata layering, Harbor's dataset hash, and the
gateway's reading of a benchmark source."""

from __future__ import annotations

import pytest
from harbor.models.dataset.manifest import DatasetManifest
from regatta_gateway.commands.benchmark_sources import parse_source
from regatta_gateway.errors import Invalid
from regatta_registry_sync.dataset import dataset_digest
from regatta_registry_sync.manifest import (
    ManifestFile,
    ManifestInvalid,
    from_deployment,
    parse_manifest,
    resolve_metadata,
)

TASKS = ["alpha", "beta", "shell-1", "shell-2"]


def manifest(text: str) -> ManifestFile:
    return ManifestFile(label="regatta.toml", text=text)


def test_a_full_manifest_maps_onto_benchmark_metadata() -> None:
    layer = parse_manifest(
        manifest(
            '[benchmark]\ndescription = " Shell tasks "\npass_threshold = 0.5\n'
            '[harness]\ndefault = "oracle"\n[judge]\nrequires_model = true\ndefault_model = "m"\n'
            '[task_sets.parity]\ntasks = ["shell-*", "alpha"]\nrecommended = true\n'
        )
    )
    metadata = resolve_metadata([layer], TASKS, "from the registry")
    assert metadata.description == "Shell tasks" and metadata.pass_threshold == 0.5
    assert metadata.default_harness == "oracle" and metadata.judge_model_default == "m"
    assert metadata.task_sets == {"parity": ["shell-1", "shell-2", "alpha"]}
    assert metadata.recommended_task_set == "parity"


def test_without_a_manifest_the_dataset_description_and_defaults_apply() -> None:
    metadata = resolve_metadata([], TASKS, "from the registry")
    assert metadata.description == "from the registry" and metadata.pass_threshold == 1.0
    assert metadata.verifier_integrity == "record"


def test_a_manifest_or_the_deployment_names_the_verifier_integrity_policy() -> None:
    layer = parse_manifest(manifest('[benchmark]\nverifier_integrity = "enforce"\n'))
    assert resolve_metadata([layer], TASKS).verifier_integrity == "enforce"
    declared = from_deployment({"verifier_integrity": "record"})
    assert resolve_metadata([layer, declared], TASKS).verifier_integrity == "record"
    with pytest.raises(ManifestInvalid, match=r"^deployment metadata: verifier_integrity must be"):
        resolve_metadata([from_deployment({"verifier_integrity": "off"})], TASKS)


def test_a_manifest_hides_solutions() -> None:
    assert resolve_metadata([], TASKS).show_solutions is True
    layer = parse_manifest(manifest("[benchmark]\nshow_solutions = false\n"))
    assert resolve_metadata([layer], TASKS).show_solutions is False


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        ("[benchmark\n", "manifest regatta.toml: not valid TOML"),
        ("schema_version = 2\n", "manifest regatta.toml: schema_version must be 1 (got 2)"),
        ("[bench]\n", "manifest regatta.toml: unknown key 'bench'"),
        ("[judge]\nmodel = 'x'\n", "manifest regatta.toml: unknown key [judge].model"),
        (
            "[harness]\nrequired = 'yes'\n",
            "manifest regatta.toml: [harness].required must be a boolean (got 'yes')",
        ),
        (
            "[harness]\ndefault = 'robot'\n",
            "manifest regatta.toml: [harness].default: unknown harness 'robot'",
        ),
        (
            "[harness]\nsupported = false\nrequired = true\n",
            "manifest regatta.toml: [harness].required: a required harness needs a supported harness",
        ),
        (
            "[judge]\ndefault_model = 'm'\n",
            "manifest regatta.toml: [judge].default_model: a default judge model",
        ),
        ("[task_sets]\np = []\n", "manifest regatta.toml: [task_sets.p]: tasks must be a non-empty list"),
        (
            "[task_sets]\np = ['gamma']\n",
            "manifest regatta.toml: [task_sets]: task set 'p' names unknown task",
        ),
        (
            "[task_sets]\np = ['x*']\n",
            "manifest regatta.toml: [task_sets]: task set 'p': pattern 'x*' matches no",
        ),
        (
            "[task_sets.a]\ntasks = ['alpha']\nrecommended = true\n"
            "[task_sets.b]\ntasks = ['beta']\nrecommended = true\n",
            "manifest regatta.toml: only one task set can be recommended (got a, b)",
        ),
        (
            "[benchmark]\npass_threshold = nan\n",
            "manifest regatta.toml: [benchmark].pass_threshold must be a finite",
        ),
        (
            "[benchmark]\nverifier_integrity = 'strict'\n",
            "manifest regatta.toml: [benchmark].verifier_integrity must be "
            '"record" or "enforce" (got \'strict\')',
        ),
        (
            "[benchmark]\nverifier_integrity = true\n",
            "manifest regatta.toml: [benchmark].verifier_integrity must be a string (got True)",
        ),
        (
            "[benchmark]\nshow_solutions = 'no'\n",
            "manifest regatta.toml: [benchmark].show_solutions must be a boolean (got 'no')",
        ),
    ],
)
def test_a_bad_manifest_names_the_file_and_the_field(text: str, reason: str) -> None:
    with pytest.raises(ManifestInvalid) as error:
        resolve_metadata([parse_manifest(manifest(text))], TASKS)
    assert str(error.value).startswith(reason), str(error.value)


def test_declared_metadata_wins_field_by_field_and_task_sets_merge_set_by_set() -> None:
    layer = parse_manifest(
        manifest("[benchmark]\npass_threshold = 0.5\n[task_sets]\na = ['alpha']\nb = ['beta']\n")
    )
    declared = from_deployment({"pass_threshold": 0.9, "task_sets": {"b": ["alpha"], "c": ["shell-*"]}})
    metadata = resolve_metadata([layer, declared], TASKS)
    assert metadata.pass_threshold == 0.9
    assert metadata.task_sets == {"a": ["alpha"], "b": ["alpha"], "c": ["shell-1", "shell-2"]}
    with pytest.raises(ManifestInvalid, match="deployment metadata: unknown field 'threshold'"):
        from_deployment({"threshold": 1})


def test_dataset_digest_is_harbors_dataset_manifest_hash_with_and_without_files() -> None:
    digests = ["sha256:" + c * 64 for c in "ba"]
    files = {"metric.py": "sha256:" + "c" * 64}
    harbor = DatasetManifest.model_validate(
        {
            "dataset": {"name": "o/d"},
            "tasks": [{"name": f"o/t{i}", "digest": d} for i, d in enumerate(digests)],
            "files": [{"path": "metric.py", "digest": files["metric.py"]}],
        }
    )
    assert dataset_digest(digests, files) == "sha256:" + harbor.compute_content_hash()
    assert (
        dataset_digest(digests) == "sha256:" + harbor.model_copy(update={"files": []}).compute_content_hash()
    )


def test_the_gateway_reads_every_source_type() -> None:
    git = parse_source({"repo": "https://example.org/org/bench.git@v1", "path": "suite"})
    assert (git.type, git.git_url, git.git_ref, git.subdir, git.ref) == (
        "git",
        "https://example.org/org/bench.git",
        "v1",
        "suite",
        "https://example.org/org/bench.git@v1",
    )
    scp = parse_source({"source_type": "git", "repo": "git@example.org:org/bench.git"})
    assert (scp.git_url, scp.git_ref) == ("git@example.org:org/bench.git", None)
    hub = parse_source({"dataset": "acme/suite@3"})
    assert (hub.type, hub.dataset, hub.version) == ("hub", "acme/suite", "3")
    url = parse_source({"registry": "https://example.org/registry.json", "dataset": "x@1.0"})
    assert (url.type, url.registry_url, url.registry_path, url.version) == (
        "registry",
        "https://example.org/registry.json",
        None,
        "1.0",
    )
    folder = parse_source({"path": "/srv/tasks", "metadata": {"pass_threshold": 0.5}})
    assert (folder.type, folder.ref, folder.metadata) == ("folder", "/srv/tasks", {"pass_threshold": 0.5})


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"source_type": "git", "repo": "/srv/repo", "ref": "-x"}, "ref"),
        ({"source_type": "git", "repo": "/srv/repo", "ref": "a..b"}, "ref"),
        ({"source_type": "git", "repo": "ext::sh -c touch% /tmp/x"}, "repo"),
        ({"source_type": "git", "repo": "relative/repo"}, "repo"),
        ({"source_type": "git", "repo": "/srv/repo", "path": "../etc"}, "path"),
        ({"source_type": "git", "repo": "/srv/repo", "registry_path": "r.json"}, "dataset"),
        ({"source_type": "hub", "dataset": "acme/suite@Not_A_Tag"}, "dataset"),
        ({"source_type": "registry", "registry": "ftp://host/registry.json", "dataset": "x"}, "registry_url"),
        ({"source_type": "nope"}, "source_type"),
        ({"path": "/srv", "metadata": {"task_sets": {"a": "alpha"}}}, "metadata.task_sets.a"),
        ({"path": "/srv", "metadata": {"verifier_integrity": "strict"}}, "metadata.verifier_integrity"),
    ],
)
def test_the_gateway_refuses_a_bad_source_naming_the_field(body: dict, field: str) -> None:
    with pytest.raises(Invalid) as error:
        parse_source(body)
    assert error.value.field == field
