"""`python run.py --help` prints the project's own help, read from conf/ when asked: the groups
and their options, the common keys with the values in effect, sweeps, resume and where Hydra's
help is; exit 0, nothing created."""
from __future__ import annotations

import re
import shutil

from experiments.engine.launcher.compose import CONF_DIR, compose_job
from experiments.engine.launcher.help import NOT_RUN_GROUPS, help_text, overrides_for_help


def test_help_lists_every_group_option_and_the_common_keys(tmp_path, run_py_before_launch):
    output_root = tmp_path / "outputs"
    result = run_py_before_launch(["--help", f"output_root={output_root}"], timeout=120)
    assert result.returncode == 0, result.stderr
    text = result.stdout
    assert "== Config ==" not in text and "Traceback" not in result.stderr  # not Hydra's help
    # Every folder of conf/ is a group run.py takes, except conf/compute_profile/: GPU profiles read
    # by `make endtoend` only (experiments/studies/endtoend/compute.py); run.py refuses compute_profile=...,
    # so the help must not offer it.
    groups = sorted(folder.name for folder in CONF_DIR.iterdir() if folder.is_dir() and folder.name not in NOT_RUN_GROUPS)
    assert NOT_RUN_GROUPS == ("compute_profile",) and len(groups) == 11, groups
    assert not re.search(r"^  compute_profile:", text, re.M)
    for group in groups:
        # The group's own block: from its header to the blank line that ends it; one line per
        # option, its name right after the default marker. Options straight from conf/, nested
        # ones as folder/name: not from the helper the help itself lists them with.
        block = re.search(rf"^  {group}:.*\n((?:    .*\n)+)", text, re.M)
        assert block, f"no block for group {group}"
        listed = re.findall(r"^    [* ] (\S+)(?:  |$)", block.group(1), re.M)
        on_disk = sorted(str(path.relative_to(CONF_DIR / group).with_suffix("")) for path in (CONF_DIR / group).rglob("*.yaml"))
        assert listed == on_disk, group
    assert "* topk" in text and "* cnn" in text and "* fashion_mnist" in text  # the defaults are marked
    for key in ("workers=4", "processes=null", "epochs=2", "max_steps=null", "batch_size=32", "seed=0",
                "device=auto", f"output_root={output_root}", "logger.log_every=10", "launcher.timeout_s=300",
                "sparsifier.density=0.01", "checkpoint.keep=2"):
        assert re.search(rf"^  {re.escape(key)}( |$)", text, re.M), key
    assert "data-parallel workers W" in text  # the comment beside the key in conf/config.yaml
    assert "python run.py -m " in text and "resume=" in text and "--hydra-help" in text
    assert not output_root.exists()  # composed in memory: no run directory, no process


def test_help_shows_the_options_and_values_of_the_command_line(run_py_before_launch):
    result = run_py_before_launch(["-h", "-m", "sparsifier=micro,deft", "workers=8", "logger=local"], timeout=120)
    assert result.returncode == 0, result.stderr
    assert "* micro" in result.stdout and "* local" in result.stdout and "  workers=8 " in result.stdout
    assert "sparsifier.threshold_rule=official" in result.stdout  # micro's knobs, with their comments
    assert "knobs of sparsifier=micro" in result.stdout


def test_help_with_a_bad_override_fails_like_any_command_line(run_py_before_launch):
    result = run_py_before_launch(["--help", "worker=4"], timeout=120)
    assert result.returncode == 2
    assert result.stderr.strip().splitlines() == [
        "error: unknown key 'worker': not in the config. Did you mean 'workers'? (python run.py --cfg job lists every key)"]


def test_hydras_own_help_stays_reachable(run_py_before_launch):
    result = run_py_before_launch(["--hydra-help"], timeout=120)
    assert result.returncode == 0, result.stderr
    assert "Hydra" in result.stdout and "sparsebench" not in result.stdout


def test_a_new_option_and_its_description_appear_without_code_changes(tmp_path):
    """The help reads conf/ when asked: a config file added later shows up with its comment."""
    conf = tmp_path / "conf"
    shutil.copytree(CONF_DIR, conf)
    (conf / "sparsifier" / "mine.yaml").write_text(
        "# Mine: a method added after this test was written. More text here.\n_target_: sparsifiers.topk.TopK\n")
    text = help_text(compose_job([]), conf, width=100)
    # the option column is as wide as the longest option name (dense_overlap today)
    assert re.search(r"\n      mine +Mine: a method added after this test was written\.\n", text), text


def test_help_overrides_keep_the_first_value_of_a_sweep():
    assert overrides_for_help(["-m", "--help", "workers=2,4", "sparsifier=topk", "x=[1,2]"]) == \
        ["workers=2", "sparsifier=topk", "x=[1,2]"]


def test_every_common_key_of_the_help_says_what_it_is():
    """A key line with no description means a config file lost its comment: the help is read
    from conf/, so the comment is the documentation."""
    text = help_text(compose_job([]), CONF_DIR)
    keys = re.findall(r"^  ([\w.]+)=(\S*)( *)(.*)$", text, re.M)
    assert len(keys) > 20
    undescribed = [key for key, _, _, description in keys if not description.strip()]
    assert undescribed == []
