"""An MCP server built with the `mcp` package (FastMCP) for shepherd's tests.

Usage: fixture_server.py stdio [MARKER]
       fixture_server.py http PORT [MARKER]

MARKER is ignored; tests put a unique word in the argv to find the process.

Tools: echo (read-only), add, fail (raises: an isError result), hang (never
answers), crash (the process exits), make_dir (writes, annotated not
destructive), spawn_sleeper (leaves a grandchild behind,
for the orphan check), grow (adds a tool and sends tools/list_changed).
"""

import os
import subprocess
import sys
import time

from mcp.server.fastmcp import Context, FastMCP
from mcp.types import ToolAnnotations

PORT = int(sys.argv[2]) if sys.argv[1] == "http" else 8000
server = FastMCP("shepherd-fixture", host="127.0.0.1", port=PORT)


@server.tool(annotations=ToolAnnotations(readOnlyHint=True))
def echo(text: str) -> str:
    """Returns its text, prefixed with 'echo: '."""
    return f"echo: {text}"


@server.tool()
def add(a: int, b: int) -> str:
    """Adds two integers."""
    return str(a + b)


@server.tool()
def fail(message: str) -> str:
    """Always fails with the given message."""
    raise ValueError(message)


@server.tool()
def hang() -> str:
    """Never returns."""
    while True:
        time.sleep(3600)


@server.tool()
def crash() -> str:
    """Exits the server process at once."""
    os._exit(3)


@server.tool(annotations=ToolAnnotations(readOnlyHint=False, destructiveHint=False))
def make_dir(name: str) -> str:
    """Creates a directory (annotated as the filesystem server's create_directory is)."""
    os.makedirs(name, exist_ok=True)
    return "made"


@server.tool()
def spawn_sleeper(marker: str, detach: bool = False) -> str:
    """Starts a background sleeper whose argv carries the marker; with detach,
    in a session of its own (setsid), out of the server's process group."""
    subprocess.Popen(
        [sys.executable, "-c", "import time; time.sleep(1000)", marker],
        start_new_session=detach,
    )
    return "started"


@server.tool()
async def grow(ctx: Context) -> str:
    """Adds a tool named 'grown' and tells the client the tool list changed."""

    def grown() -> str:
        """A tool added at run time."""
        return "grown"

    server.add_tool(grown)
    await ctx.session.send_tool_list_changed()
    return "added"


@server.resource("fixture://greeting")
def greeting() -> str:
    """A fixed text resource."""
    return "hello from a resource"


if __name__ == "__main__":
    print("fixture server starting", file=sys.stderr, flush=True)
    server.run("streamable-http" if sys.argv[1] == "http" else "stdio")
