"""The catalog models' tokenizer files, served the way the Hugging Face Hub serves a repository's
files, so a client anywhere loads a base model's tokenizer by its name:

    HF_ENDPOINT=http://gateway:8100/hf  ->  AutoTokenizer.from_pretrained("tiny-llama")

That is what the SDK's `SamplingClient.get_tokenizer()` and tinker-cookbook's `get_tokenizer(name)`
do. Only tokenizer and config files are served (never weights), for catalog names only; a name
that is not in the catalog is a missing repository.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

from aiohttp import web

SERVED_FILES = frozenset({
    "tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "added_tokens.json", "vocab.json",
    "merges.txt", "tokenizer.model", "chat_template.jinja", "chat_template.json", "config.json",
    "generation_config.json",
})
TOKENIZER_DIRS = web.AppKey("tokenizer_dirs", dict)


def add_routes(app: web.Application, tokenizer_dirs: dict[str, Path]) -> None:
    app[TOKENIZER_DIRS] = tokenizer_dirs
    app.router.add_get("/hf/{repo:.+}/resolve/{revision}/{filename}", resolve)
    app.router.add_get("/hf/api/models/{repo:.+}/tree/{revision}/{path:.*}", missing_tree)


async def resolve(request: web.Request) -> web.StreamResponse:
    repo, filename = request.match_info["repo"], request.match_info["filename"]
    directory = request.app[TOKENIZER_DIRS].get(repo)
    if directory is None:
        return _error(404, "RepoNotFound", f"{repo!r} is not a base model of this gateway")
    path = Path(directory) / filename
    if filename not in SERVED_FILES or not path.is_file():
        return _error(404, "EntryNotFound", f"{filename} is not served for {repo}")
    data = path.read_bytes()
    headers = {"ETag": f'"{hashlib.sha256(data).hexdigest()}"', "X-Repo-Commit": _commit(repo, directory),
               "Content-Length": str(len(data))}
    if request.method == "HEAD":
        return web.Response(status=200, headers=headers)
    return web.Response(body=data, headers=headers, content_type="application/octet-stream")


async def missing_tree(request: web.Request) -> web.Response:
    return _error(404, "EntryNotFound", "no extra files")


def _commit(repo: str, directory: Path) -> str:
    return hashlib.sha1(f"{repo}\n{directory}".encode()).hexdigest()


def _error(status: int, code: str, message: str) -> web.Response:
    return web.json_response({"error": message}, status=status, headers={"X-Error-Code": code})
