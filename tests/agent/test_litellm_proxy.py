"""agentd behind LiteLLM's proxy (tests/support/litellm_peer.py), a real
OpenAI-compatible gateway, itself in front of the suite's recording gateway
(tests/support/gateway.py): the real `agentd` console script's requests pass
through LiteLLM as a deployment would send them, and LiteLLM's own refusal of a
wrong key reaches the user named by its variable, never its value."""

from __future__ import annotations

from pathlib import Path

from agentd_proc import agentd_env, run_agentd
from gateway import Gateway, Reply
from litellm_peer import LitellmProxy, litellm_cli  # noqa: F401  (the fixture)

MASTER = "sk-proxy-master-7319"  # the bearer LiteLLM asks of agentd
UPSTREAM = "sk-upstream-5521"  # the key LiteLLM sends on to the recording gateway


def proxy(cli: str, tmp: Path, gw: Gateway) -> LitellmProxy:
    return LitellmProxy(cli, tmp, model="proxied", upstream=gw.url, upstream_key=UPSTREAM,
                        master_key=MASTER)


def args(url: str) -> list[str]:
    return ["--instruction", "say hi", "--intelligence", url, "--model", "proxied",
            "--temperature", "0.3", "--seed", "5", "--max-tokens", "64"]


async def test_a_run_completes_through_the_proxy_with_its_sampling_settings(
        agentd_bin, litellm_cli, tmp_path) -> None:  # noqa: F811
    async with Gateway([Reply.text("hi from upstream")]) as gw:
        async with proxy(litellm_cli, tmp_path, gw) as lp:
            done = await run_agentd(agentd_bin, args(lp.url),
                                    env=agentd_env(OPENAI_API_KEY=MASTER, AGENTD_MODEL=""))
    assert done.rc == 0, done.stderr + lp.output()
    assert done.result["result"] == "hi from upstream"
    [body] = gw.bodies
    # LiteLLM routes "proxied" to its deployment's model and keeps the settings as sent:
    # the same fields as agentd sends, nothing added, nothing renamed
    assert set(body) == {"messages", "model", "tools", "temperature", "seed", "max_tokens"}
    assert [m["role"] for m in body["messages"]] == ["system", "user"]
    assert body["model"] == "upstream-model"
    assert (body["temperature"], body["seed"], body["max_tokens"]) == (0.3, 5, 64)
    assert gw.headers[0]["Authorization"] == f"Bearer {UPSTREAM}"
    assert MASTER not in done.stderr + done.stdout


async def test_a_refused_key_keeps_litellms_text_and_names_the_variable(
        agentd_bin, litellm_cli, tmp_path) -> None:  # noqa: F811
    """LiteLLM with a master key and no database answers a request without a key
    401 "No api key passed in." and any other key 400 "No connected db." (it
    would look the key up among its virtual keys): agentd keeps that text either
    way, and names the variable to set where the status says the key is at fault."""
    wrong = "sk-not-the-master-8086"
    async with Gateway() as gw:
        async with proxy(litellm_cli, tmp_path, gw) as lp:
            runs = [await run_agentd(agentd_bin, args(lp.url), env=agentd_env(AGENTD_MODEL="", **env))
                    for env in ({}, {"AGENTD_INTELLIGENCE_KEY": wrong}, {"OPENAI_API_KEY": wrong})]
    assert gw.bodies == []  # LiteLLM refused each itself
    for done in runs:
        assert done.rc == 5, done.stderr
        assert wrong not in done.stderr and MASTER not in done.stderr
    [no_key], [by_agentd_key], [by_openai_key] = (
        [e["error"] for e in done.events("intelligence.unavailable")] for done in runs)
    head = f"intelligence gateway {lp.url}/chat/completions refused the request: HTTP "
    assert no_key == (f'{head}401 {{"error":{{"message":"Authentication Error, No api key passed '
                      'in.","type":"auth_error","param":"None","code":"401"}}: no key was sent: '
                      "set env AGENTD_INTELLIGENCE_KEY (or OPENAI_API_KEY) to the gateway's API key")
    # a 400 is not the key's fault by its status, so agentd adds no hint: LiteLLM's text stays
    assert by_agentd_key == by_openai_key == (
        f'{head}400 {{"error":{{"message":"No connected db.","type":"no_db_connection",'
        '"param":null,"code":"400"}}')
