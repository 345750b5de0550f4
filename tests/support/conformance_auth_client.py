"""The conformance suite's client ``auth/*`` scenarios, through the real console script.

    conformance client --command "python tests/support/conformance_auth_client.py" --scenario auth/…

The suite appends its MCP server URL and names the scenario in env
``MCP_CONFORMANCE_SCENARIO`` (credentials it expects in
``MCP_CONFORMANCE_CONTEXT``).  This adapter writes an agentd config for the
scenario into a fresh state directory and runs ``agentd`` as a user would:

* people (authorization code): ``agentd auth login conformance`` with
  ``$BROWSER`` = tests/support/oauth_browser.py (follows the authorization redirect to
  agentd's loopback listener), then a playback run that lists and calls
  ``test-tool`` with the stored login -- with ``--auth-interactive`` for the
  step-up scenarios (the tool call needs a second, wider login);
* daemons (client credentials): just the run (no login, no store).

Exit status: 0 when every agentd command succeeded.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
AGENTD = [sys.executable, "-m", "agentd"]
STEP_UP = {"auth/scope-step-up", "auth/scope-retry-limit"}
CIMD_URL = "https://conformance-test.local/client-metadata.json"


def _toml_str(value: str) -> str:
    return json.dumps(value)  # a TOML basic string is a JSON string


def write_config(work: Path, url: str, scenario: str, ctx: dict, env: dict) -> Path:
    auth = ""
    if scenario == "auth/pre-registration":
        env["AGENTD_SECRET_CONF_CLIENT_SECRET"] = ctx["client_secret"]
        auth = (f'auth = {{ type = "oauth", client_id = {_toml_str(ctx["client_id"])}, '
                'client_secret = "{{secret:CONF_CLIENT_SECRET}}" }')
    elif scenario in ("auth/basic-cimd", "auth/offline-access-scope"):
        auth = f'auth = {{ type = "oauth", client_id_metadata_url = {_toml_str(CIMD_URL)} }}'
    elif scenario == "auth/client-credentials-basic":
        env["AGENTD_SECRET_CONF_CLIENT_SECRET"] = ctx["client_secret"]
        auth = (f'auth = {{ type = "client_credentials", client_id = '
                f'{_toml_str(ctx["client_id"])}, '
                'client_secret = "{{secret:CONF_CLIENT_SECRET}}" }')
    elif scenario == "auth/client-credentials-jwt":
        key = work / "client-key.pem"
        key.write_text(ctx["private_key_pem"])
        key.chmod(0o600)
        auth = (f'auth = {{ type = "client_credentials", client_id = '
                f'{_toml_str(ctx["client_id"])}, private_key_file = {_toml_str(str(key))}, '
                f'signing_algorithm = {_toml_str(ctx.get("signing_algorithm", "ES256"))} }}')
    cfg = work / "agentd.toml"
    cfg.write_text(f'[[mcp_servers]]\nname = "conformance"\nurl = {_toml_str(url)}\n'
                   + (auth + "\n" if auth else ""))
    return cfg


def write_script(work: Path) -> Path:
    script = work / "playback.json"
    script.write_text(json.dumps({"playback": 1, "scripts": [{"name": "root", "turns": [
        {"tool_calls": [{"name": "conformance__test-tool", "arguments": {}}]},
        {"content": "done"}]}]}))
    return script


def run(cmd: list[str], env: dict) -> int:
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=60)
    sys.stdout.write(proc.stdout)
    sys.stderr.write(proc.stderr)
    print(f"[adapter] {' '.join(cmd[2:])} -> exit {proc.returncode}", file=sys.stderr)
    return proc.returncode


def main() -> int:
    url = sys.argv[-1]
    scenario = os.environ.get("MCP_CONFORMANCE_SCENARIO", "")
    ctx = json.loads(os.environ.get("MCP_CONFORMANCE_CONTEXT") or "{}")
    with tempfile.TemporaryDirectory(prefix="agentd-conf-auth-") as tmp:
        work = Path(tmp)
        env = dict(os.environ)
        env["BROWSER"] = str(HERE / "oauth_browser.py")
        env.setdefault("AGENTD_LOG_LEVEL", "info")
        cfg = write_config(work, url, scenario, ctx, env)
        common = ["--config", str(cfg), "--state-dir", str(work / "state")]
        people = "client-credentials" not in scenario
        if people:
            rc = run([*AGENTD, "auth", "login", "conformance", *common, "--timeout", "20"], env)
            if rc != 0:
                return rc
            rc = run([*AGENTD, "auth", "status", *common], env)
            if rc != 0:
                return rc
        argv = [*AGENTD, *common, "--instruction", "call the test tool",
                "--intelligence", f"playback:{write_script(work)}", "--ping-interval", "60",
                "--spawn", "exec"]
        if scenario in STEP_UP:
            argv.append("--auth-interactive")
        return run(argv, env)


if __name__ == "__main__":
    sys.exit(main())
