"""launch.config.redact: what leaves the run directory has no password, token or credential in it (hand-written
cases: URLs of any scheme with and without a user, ports, query strings; secret-named fields in nested dicts
and lists; argv), and nothing else changes (a real resolved config differs in its Redis URL only)."""

from __future__ import annotations

import pytest

from launch.config.redact import REDACTED, is_secret_name, redact


@pytest.mark.parametrize("url, want", [
    ("redis://:pw@127.0.0.1:6379/0", "redis://:***@127.0.0.1:6379/0"),
    ("rediss://default:s3cr%40t@redis.example.com:6380/2", "rediss://default:***@redis.example.com:6380/2"),
    ("http://user:tok@mlflow.internal", "http://user:***@mlflow.internal"),
    ("https://user:tok@mlflow.internal:5000/api?x=1", "https://user:***@mlflow.internal:5000/api?x=1"),
    ("https://ghp_abcdef@github.com/org/repo.git", "https://***@github.com/org/repo.git"),    # a lone token
    ("postgresql+psycopg2://ml:pw@db:5432/mlflow", "postgresql+psycopg2://ml:***@db:5432/mlflow"),
    ("redis://:p@ss@host:1/0", "redis://:***@host:1/0"),             # an unescaped '@': split at the last one
    ("redis://127.0.0.1:6379/0", "redis://127.0.0.1:6379/0"),        # no userinfo: unchanged
    ("http://host/path@v2", "http://host/path@v2"),                  # '@' in the path is not userinfo
    ("file:/tmp/runs/mlruns", "file:/tmp/runs/mlruns"),
    ("redis://h:1/0?password=pw&db=0", "redis://h:1/0?password=***&db=0"),
    ("https://h/x?access_token=abc#frag", "https://h/x?access_token=***#frag"),
    ("https://h/x?api_key=abc&max_tokens=16", "https://h/x?api_key=***&max_tokens=16"),
    ("https://u:p@h/x?token=t", "https://u:***@h/x?token=***"),
])
def test_urls(url, want):
    assert redact(url) == want


def test_urls_inside_text_and_several_in_one_line():
    line = "[driver] redis redis://:pw1@127.0.0.1:7000/0; mlflow http://me:pw2@h:5000 (run x)"
    assert redact(line) == "[driver] redis redis://:***@127.0.0.1:7000/0; mlflow http://me:***@h:5000 (run x)"
    assert redact('{"a": "redis://:pw@h/0", "b": "x"}') == '{"a": "redis://:***@h/0", "b": "x"}'
    assert redact("no secrets here: 3 steps, lr=1e-6, max_tokens=16") == \
        "no secrets here: 3 steps, lr=1e-6, max_tokens=16"


@pytest.mark.parametrize("name", ["password", "PASSWORD", "redis_password", "passwd", "hf_token", "access_token",
                                  "token", "client_secret", "secret_key", "api_key", "apiKey", "ApiKey",
                                  "aws_access_key_id", "private_key", "credentials", "gcp-credential", "auth",
                                  "Authorization", "--buffer.password", "wandb.api_key"])
def test_secret_names(name):
    assert is_secret_name(name)


@pytest.mark.parametrize("name", ["max_tokens", "tokens_per_s", "tokenizer_path", "prompt_key", "answer_key",
                                  "eval_max_tokens", "auth_mode", "keys", "redis_url", "mlflow_uri", "passes",
                                  "key"])
def test_not_secret_names(name):
    assert not is_secret_name(name)


def test_nested_dicts_and_lists():
    cfg = {"run_id": "r1", "buffer": {"redis_url": "redis://:pw@h:1/0", "password": "pw", "token": None},
           "tracking": {"mlflow_uri": "https://u:t@mlflow", "backends": ["tensorboard", "mlflow"],
                        "headers": [{"name": "x", "api_key": "k"}, {"Authorization": "Bearer abc"}]},
           "credentials": {"user": "u", "key": "k"}, "data": {"max_tokens": 16, "prompt_key": "problem"},
           "steps": 3, "lr": 1e-6, "flag": True, "empty_secret": ""}
    out = redact(cfg)
    assert out == {"run_id": "r1", "buffer": {"redis_url": "redis://:***@h:1/0", "password": REDACTED, "token": None},
                   "tracking": {"mlflow_uri": "https://u:***@mlflow", "backends": ["tensorboard", "mlflow"],
                                "headers": [{"name": "x", "api_key": REDACTED}, {"Authorization": REDACTED}]},
                   "credentials": REDACTED, "data": {"max_tokens": 16, "prompt_key": "problem"},
                   "steps": 3, "lr": 1e-6, "flag": True, "empty_secret": ""}
    assert cfg["buffer"]["password"] == "pw" and cfg["credentials"] == {"user": "u", "key": "k"}, "a copy"


def test_argv_flags_and_assignments():
    argv = ["--tiny", "--buffer.redis_url", "redis://:pw@h:1/0", "--hf_token", "abc", "--api-key=xyz",
            "--data.max_tokens", "16", "--password", "--steps", "3"]
    assert redact(argv) == ["--tiny", "--buffer.redis_url", "redis://:***@h:1/0", "--hf_token", REDACTED,
                            "--api-key=***", "--data.max_tokens", "16", "--password", "--steps", "3"]
    assert redact(("a", "token=t")) == ["a", "token=***"]


def test_other_values_and_the_resolved_config():
    from launch.run.compose import build_config

    assert [redact(v) for v in (None, 3, 2.5, True)] == [None, 3, 2.5, True]
    cfg, _ = build_config(["--tiny", "--buffer.redis_url", "redis://:hunter2@127.0.0.1:7000/0"], "multistage")
    plain, out = cfg.model_dump(mode="json"), redact(cfg)
    assert out["buffer"]["redis_url"] == "redis://:***@127.0.0.1:7000/0" and "hunter2" not in repr(out)
    out["buffer"]["redis_url"] = plain["buffer"]["redis_url"]
    assert out == plain, "nothing but the secret changes"
