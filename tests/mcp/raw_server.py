"""A hand-written MCP stdio server for the client's edge cases (no SDK).

Usage: raw_server.py MODE, MODE one of:
  normal      answers 2025-11-25; tools/list in two pages; writes junk lines,
              log notifications and a ping request between its answers
  old         answers protocolVersion 2024-11-05
  bad         answers an unsupported protocolVersion
  silent      reads everything and never answers
Tools (normal mode): echo (text), big (a 17 MiB junk line, then the answer),
pinged (whether our answer to the server's ping arrived), hang (never
answers), cancelled (the request ids and reasons of notifications/cancelled),
image (read-only: the text "sha256 HEX" of a 3x2 PNG, then that PNG as
`image` content).
"""

import base64
import hashlib
import json
import struct
import sys
import zlib

MODE = sys.argv[1]
state = {"pinged": False, "cancelled": []}


def send(message):
    sys.stdout.write(json.dumps(message) + "\n")
    sys.stdout.flush()


def answer(request, result):
    send({"jsonrpc": "2.0", "id": request["id"], "result": result})


def initialize(request):
    version = {"old": "2024-11-05", "bad": "1999-01-01"}.get(MODE, "2025-11-25")
    answer(request, {"protocolVersion": version, "capabilities": {"tools": {"listChanged": True}},
                     "serverInfo": {"name": "raw", "version": "0"}, "instructions": "Be nice."})


def tool(name):
    return {"name": name, "description": f"the {name} tool",
            "inputSchema": {"type": "object", "properties": {"text": {"type": "string"}}}}


def png(width, height, rgb):
    """A truecolour PNG of one colour, written by hand (no imaging library)."""
    def chunk(kind, data):
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))
    rows = b"".join(b"\x00" + bytes(rgb) * width for _ in range(height))
    header = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", zlib.compress(rows))
            + chunk(b"IEND", b""))


def image_result():
    data = png(3, 2, (250, 128, 7))
    return {"content": [
        {"type": "text", "text": "sha256 " + hashlib.sha256(data).hexdigest()},
        {"type": "image", "data": base64.b64encode(data).decode(), "mimeType": "image/png"},
    ], "isError": False}


def tools_list(request):
    sys.stdout.write("this line is not JSON\n")
    send({"jsonrpc": "2.0", "method": "notifications/message", "params": {"level": "info", "data": "listing"}})
    if request.get("params", {}).get("cursor") == "page-2":
        image = dict(tool("image"), annotations={"readOnlyHint": True})
        answer(request, {"tools": [tool("big"), tool("pinged"), image]})
    else:
        send({"jsonrpc": "2.0", "id": "srv-1", "method": "ping"})
        answer(request, {"tools": [tool("echo")], "nextCursor": "page-2"})


def tools_call(request):
    name = request["params"]["name"]
    if name == "big":
        sys.stdout.write("x" * (17 * 1024 * 1024) + "\n")
        text = "after the big line"
    elif name == "pinged":
        text = str(state["pinged"])
    elif name == "hang":
        return
    elif name == "cancelled":
        text = json.dumps(state["cancelled"])
    elif name == "image":
        return answer(request, image_result())
    else:
        text = "raw echo: " + request["params"]["arguments"].get("text", "")
    answer(request, {"content": [{"type": "text", "text": text}], "isError": False})


for line in sys.stdin:
    message = json.loads(line)
    if MODE == "silent":
        continue
    if message.get("id") == "srv-1":
        state["pinged"] = "result" in message
        continue
    method = message.get("method")
    if method == "notifications/cancelled":
        params = message["params"]
        state["cancelled"].append([params["requestId"], params.get("reason")])
    elif method == "initialize":
        initialize(message)
    elif method == "tools/list":
        tools_list(message)
    elif method == "tools/call":
        tools_call(message)
    elif "id" in message:
        send({"jsonrpc": "2.0", "id": message["id"], "error": {"code": -32601, "message": "no such method"}})
