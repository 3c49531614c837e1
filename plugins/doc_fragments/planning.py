# Copyright: sentinel.heal contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations


class ModuleDocFragment:
    """The options of the actions that plan (heal, plan, diagnose), kept in one place like their argument spec."""

    # What planning reads (sentinel.heal.planning).
    DOCUMENTATION = r"""
options:
  services:
    description:
      - The declared services, in the form of O(sentinel.heal.service_check#module:services).
      - Used to check the host when O(failures) is omitted, and to verify each service after its plan ran.
    type: list
    elements: dict
    required: true
  failures:
    description:
      - The C(failures) that M(sentinel.heal.service_check) returned for this host, unchanged.
      - When omitted, the services are checked first.
    type: list
    elements: dict
  facts:
    description:
      - The C(facts) that M(sentinel.heal.service_check) returned with O(failures) (service manager, OS).
        They ground the LLM's prompt and key the memory by kind of host.
    type: dict
    default: {}
  runbooks:
    description: Directories of your own runbooks (Markdown with YAML front matter), added to the shipped ones.
    type: list
    elements: path
    default: []
  builtin_runbooks:
    description: Use the runbooks shipped with the collection, besides O(runbooks).
    type: bool
    default: true
  policy:
    description: The command policy file. Defaults to the policy shipped in the collection (C(policies/default.yml)).
    type: path
  failed_ttl:
    description:
      - Seconds a plan that failed for a failure fingerprint is remembered and not tried again for it
        (0 to 31536000), while the cause it failed on holds. Once it is gone (a configuration test that failed passes
        now, the port another program held is free, a file that had changed is as last known good again, as when a
        person fixed it between the runs), the plan runs again in this run, which says so. Plans that failed during the same incident are
        never repeated in it.
    type: int
    default: 86400
  log_lines:
    description: Lines of each log file gathered as evidence when the host is checked here.
    type: int
    default: 20
  redact_values:
    description: More literal secrets to mask, in addition to those the play knows (vault values, passwords).
    type: list
    elements: str
    default: []
"""

    # The LLM and the knowledge that grounds it (sentinel.heal.planning.llm).
    LLM = r"""
options:
  llm:
    description:
      - An OpenAI-compatible chat-completions endpoint (OpenAI, Azure OpenAI, Ollama, vLLM, llama.cpp's
        server) that plans when memory and the specific runbooks have no answer. Without it (the
        default) the offline planner runs and no network is needed.
      - Its plans are judged by the guard like any other; the prompt is not a security boundary.
    type: dict
    suboptions:
      model:
        description: The model name.
        type: str
        required: true
      base_url:
        description: The API's base URL (for example C(http://127.0.0.1:11434/v1) for Ollama). Defaults to OpenAI's.
        type: str
      api_key:
        description: The API key. Defaults to the controller's C(OPENAI_API_KEY). Never shown, stored or sent to hosts.
        type: str
      timeout:
        description:
          - Seconds the whole planning call may take - every request, retry and wait included, whatever the server does
            (one that trickles its answer byte by byte too). Past it, the offline planner plans and says why.
        type: float
        default: 30.0
      max_retries:
        description:
          - Retries, with exponential backoff (and C(Retry-After), in seconds or as an HTTP date), after HTTP 408, 409,
            429, 5xx and connection errors, within O(llm.timeout).
          - A server that refuses C(response_format) (HTTP 400, or llama.cpp's 500) is asked again without it, not
            counted as a retry.
        type: int
        default: 3
      token_budget:
        description: Tokens (prompt and answer) one incident may spend over all its attempts.
        type: int
        default: 6000
      json_mode:
        description:
          - Ask for a JSON answer (C(response_format) C(json_object)). A server that refuses it (HTTP 400, or llama.cpp's
            500) is asked again without it, so this rarely needs turning off.
        type: bool
        default: true
      schema:
        description:
          - Send the plan's JSON schema in the form the server takes (structured outputs, which make small local models
            answer valid plans) - C(openai) (C(response_format) C(json_schema) - OpenAI, Azure OpenAI, vLLM, LM Studio),
            C(llamacpp) (C(response_format) C(json_object) with C(schema) - llama.cpp's server), C(ollama) (C(format) -
            Ollama's OpenAI-compatible endpoint), or C(none) (only O(llm.json_mode)). A server that refuses it is asked
            again without it.
        type: str
        choices: [none, openai, llamacpp, ollama]
        default: none
      reads:
        description:
          - How the model asks to look before it plans (the think loop, O(sentinel.heal.heal#module:think_rounds)) -
            C(tools) (OpenAI tool calling - a C(read) tool taking an argv - for OpenAI, Azure OpenAI, vLLM with a tool
            parser, Ollama, llama.cpp's server with C(--jinja)), or C(json) (instead of a plan, a JSON object whose
            C(investigate) list holds the reads, each an C(argv) and a C(why) - for servers and small models without
            tools).
          - C(auto) (the default) is C(json) when O(llm.schema) is C(llamacpp) or C(ollama), and C(tools) otherwise; a
            server that refuses tools is asked again at once in the JSON form, from then on. Either way a model may
            answer in the other form, and it behaves the same.
        type: str
        choices: [auto, tools, json]
        default: auto
  knowledge:
    description:
      - Ground the LLM's prompt in the closest runbooks and documents of the knowledge base in
        O(state_dir)C(/knowledge) (see M(sentinel.heal.knowledge)); the runbooks in use are kept in it.
      - Used only when O(llm) is set.
    type: bool
    default: true
  embeddings:
    description: The embedding model of the knowledge base, as in M(sentinel.heal.knowledge).
    type: dict
    default: {}
    suboptions:
      provider:
        description: C(minilm) (offline, the default) or C(openai) (an OpenAI-compatible embeddings endpoint).
        type: str
        default: minilm
        choices: [minilm, openai]
      base_url:
        description: The endpoint's base URL (provider C(openai)).
        type: str
      model:
        description: The embedding model (provider C(openai)).
        type: str
      api_key:
        description: The endpoint's API key (provider C(openai)).
        type: str
      timeout:
        description: Seconds one request may take (provider C(openai)).
        type: float
        default: 30.0
"""
