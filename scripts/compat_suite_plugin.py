"""pytest plugin for `make compat-suite`: llama.cpp's server tests, offline, on local models.

scripts/compat_suite.py loads it (`-p compat_suite_plugin`) into a copy of the
suite (tools/server/tests); the suite's files stay as they are. It

- points every ServerPreset at a local GGUF instead of the Hugging Face hub
  (PRESET_MODELS: COMPAT_MODEL, SmolLM2 in the Makefile), and skips the tests whose
  model has no local stand-in (a vision model with its projector, a hub model a
  test names itself, a LoRA or draft file it downloads);
- makes ServerPreset.load_all (the session's warm-up, which downloads every
  preset) do nothing;
- refuses any connection from the test process that is not to loopback: the test
  is skipped, naming the host (images and files the tests fetch from the web);
- gives each xdist worker a port of its own (COMPAT_PORT + its number);
- hides docker and podman from the tests (their probes pull images from Docker Hub);
- skips test_router.py: llama-server's router mode loads its models from the hub.

Environment: COMPAT_MODEL (required), COMPAT_PORT, COMPAT_THREADS
(--threads for every server started without its own).
"""
import os
import shutil
import socket
import sys

import pytest

sys.path.insert(0, os.getcwd())
import utils  # noqa: E402  (the suite's own module, from the working directory)

MODEL = os.environ["COMPAT_MODEL"]
THREADS = os.environ.get("COMPAT_THREADS")

# Preset -> the local model that stands in for it, or None (skipped: no stand-in).
PRESET_MODELS = {
    "tinyllama2": MODEL,           # stories260K
    "bert_bge_small": MODEL,       # an embedding model (BERT); SmolLM2 pools instead
    "bert_bge_small_with_fa": MODEL,
    "tinyllama_infill": MODEL,     # SmolLM2's tokenizer has the FIM tokens
    "stories15m_moe": MODEL,
    "jina_reranker_tiny": MODEL,   # a reranker; SmolLM2 has no rank head
    "tinygemma3": None,            # vision: the model and its mmproj from the hub
    "router": None,                # no model: router mode (see the shim for shepherd)
}
# Files the tests download (utils.download_file) that have a local stand-in.
DOWNLOADS = {
    "stories15M-q4_0.gguf": MODEL,  # test_speculative's draft model: SmolLM2 drafts for itself
}
SKIP_MODULES = {
    "test_router.py": "llama-server's router mode loads its models from the HF hub",
}
LOOPBACK = {"localhost", "127.0.0.1", "::1", "0.0.0.0", ""}


class Offline(Exception):
    pass


def _preset(name, make):
    def wrapped():
        server = make()
        server.compat_preset = name
        local = PRESET_MODELS.get(name, MODEL)
        if local is not None:
            server.model_file = local
            server.model_hf_repo = server.model_hf_file = server.model_url = None
        return server
    return staticmethod(wrapped)


for _name, _value in list(vars(utils.ServerPreset).items()):
    if isinstance(_value, staticmethod) and _name != "load_all":
        setattr(utils.ServerPreset, _name, _preset(_name, _value.__func__))
utils.ServerPreset.load_all = staticmethod(lambda: None)

_init = utils.ServerProcess.__init__


def _init_port(self):
    """COMPAT_PORT + the xdist worker's number: the suite's own 8080 + 10 * worker
    would collide with the other run and with anything else on 8080."""
    _init(self)
    base = os.environ.get("COMPAT_PORT")
    if base:
        worker = os.environ.get("PYTEST_XDIST_WORKER", "gw0")[2:]
        self.server_port = int(base) + int(worker or 0)


utils.ServerProcess.__init__ = _init_port
_start = utils.ServerProcess.start


def _checked_start(self, *args, **kwargs):
    preset = getattr(self, "compat_preset", None)
    if preset == "tinygemma3":
        pytest.skip("no local vision model: tinygemma3 and its mmproj come from the HF hub")
    if self.model_hf_repo or self.model_hf_file or self.model_url:
        pytest.skip(f"model from the HF hub: {self.model_hf_repo or self.model_url} "
                    f"{self.model_hf_file or ''}".strip())
    if self.mmproj_url:
        pytest.skip("multimodal projector from the HF hub")
    if self.n_threads is None and THREADS:
        self.n_threads = int(THREADS)
    return _start(self, *args, **kwargs)


utils.ServerProcess.start = _checked_start


def _download_file(url, output_file_path=None):
    name = url.rsplit("/", 1)[-1]
    if name in DOWNLOADS:
        return DOWNLOADS[name]
    pytest.skip(f"downloads {url}")


utils.download_file = _download_file

_which = shutil.which


def _no_containers(cmd, *args, **kwargs):
    if os.path.basename(str(cmd)) in ("docker", "podman"):
        return None
    return _which(cmd, *args, **kwargs)


shutil.which = _no_containers

_getaddrinfo = socket.getaddrinfo


def _loopback_only(host, *args, **kwargs):
    text = host.decode() if isinstance(host, bytes) else str(host or "")
    if text not in LOOPBACK and not text.startswith("127."):
        raise pytest.skip.Exception(f"offline: refused a connection to {text}",
                                    allow_module_level=True)
    return _getaddrinfo(host, *args, **kwargs)


socket.getaddrinfo = _loopback_only


def pytest_collection_modifyitems(config, items):
    for item in items:
        reason = SKIP_MODULES.get(os.path.basename(str(item.fspath)))
        if reason:
            item.add_marker(pytest.mark.skip(reason=reason))
