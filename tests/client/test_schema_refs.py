"""A tool's schema never opens a connection (issue: hostile `$ref`).

An official-SDK server lists `refd`, whose inputSchema and outputSchema put
`"$ref": "http://127.0.0.1:<port>/x.json"` on a property; that port is a real
loopback HTTP listener that counts every request it gets. agentd (the console
script) calls the tool: the call goes through, the listener is never hit, and
`mcp.tools.audit` names the reference it did not fetch, once per schema.
"""

from __future__ import annotations

import http.server
import json
import subprocess
import threading

import peers


class Counter(http.server.BaseHTTPRequestHandler):
    hits = 0

    def do_GET(self) -> None:
        type(self).hits += 1
        body = b'{"type": "string"}'
        self.send_response(200)
        self.send_header("Content-Type", "application/schema+json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


def test_a_ref_to_a_url_is_never_fetched(agentd_bin, tmp_path) -> None:
    listener = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Counter)
    thread = threading.Thread(target=listener.serve_forever, daemon=True)
    thread.start()
    ref = f"http://127.0.0.1:{listener.server_address[1]}/x.json"
    try:
        # the listener answers: a fetch would succeed and be counted
        import urllib.request
        with urllib.request.urlopen(ref, timeout=10) as r:
            assert json.loads(r.read()) == {"type": "string"}
        Counter.hits = 0
        play = tmp_path / "refs.playback.json"
        play.write_text(json.dumps({"playback": 1, "turns": [
            {"tool_calls": [{"name": "srv__refd", "arguments": {"text": "hello"}}]},
            {"tool_calls": [{"name": "srv__refd", "arguments": {"text": "again"}}]},
            {"expect": "again", "content": "done"},
        ]}))
        with peers.python_peer("fault_peers.py", "--ref-url", ref) as srv:
            proc = subprocess.run(
                [agentd_bin, "--instruction", "call refd", "--intelligence", f"playback:{play}",
                 "--mcp", f"srv={srv.url}", "--ping-interval", "60"],
                capture_output=True, text=True, timeout=120)
        assert proc.returncode == 0, proc.stderr[-3000:]
        assert json.loads(proc.stdout)["result"] == "done"
        assert Counter.hits == 0
        audits = [json.loads(ln) for ln in proc.stderr.splitlines()
                  if '"mcp.tools.audit"' in ln and "unresolved_refs" in ln]
        # once per schema: the inputSchema and the outputSchema, not once per call
        assert sorted(a["what"] for a in audits) == ["inputSchema of refd",
                                                    "outputSchema of refd"]
        assert all(a["unresolved_refs"] == [ref] for a in audits)
    finally:
        listener.shutdown()
        listener.server_close()
