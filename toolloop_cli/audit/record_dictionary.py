"""The preset dictionary audit records are deflated with: what every record repeats.

A batch record is mostly the same column names, kinds, states and JSON punctuation, record
after record; deflate can only refer back to text it has already seen, and one record alone
has seen little. Deflating against this text lets the first mention of ``"call_binding_sha256":``
in a record cost three bytes instead of twenty.

A record deflated with a dictionary names it in its zlib header (``FDICT`` and the
dictionary's Adler-32, RFC 1950 §2.2), so a reader picks the dictionary by that number and
a record written before (no ``FDICT``) inflates as it always did. Changing these bytes would
leave every record deflated with them unreadable: never edit ``RECORD_DICTIONARY_V1``; add a
new constant and list it in ``DICTIONARIES``. A test pins its Adler-32.

Only names and values toolloop itself writes are here (no tool, task or provider text):
deflate prefers nearer matches, so the most frequent pieces come last.
"""

from __future__ import annotations

import zlib

__all__ = ["DICTIONARIES", "RECORD_DICTIONARY", "RECORD_DICTIONARY_V1"]

_APPROVAL = (
    '["approval",{"approval_id":"apr_","arguments_sha256":"sha256:","call_id":"call_",'
    '"decided_at":null,"decided_by":null,"expires_at":"","policy_revision":"",'
    '"policy_sha256":"sha256:","reason":null,"requested_at":"","requested_by":"operator",'
    '"response_id":"","status":"PENDING","tenant":"default","tool":"","tool_sha256":"sha256:"}]'
    '"status":"APPROVED","status":"REJECTED","status":"EXPIRED","decided_by":"'
)
_OPERATION = (
    '["operation",{"adapter_revision":"openai-responses/1","api_family":"responses",'
    '"anthropic-messages/1","api_family":"messages","gemini-interactions/1",'
    '"api_family":"interactions","counters_json":"{\\"cost_usd\\": 0.0, \\"input_tokens\\": 0, '
    '\\"output_tokens\\": 0, \\"recent_turns\\": [], \\"requests\\": 0, \\"retries\\": 0, '
    '\\"tool_calls\\": 0, \\"tool_calls_by_tool\\": {}, \\"total_tokens\\": 0, \\"turns\\": 0}",'
    '"created_at":"","current_turn":null,"deadline_at":"","divergence_json":null,'
    '"final_text":null,"guards_json":"{\\"deadline_s\\": 86400.0, \\"max_calls_per_tool\\": {}, '
    '\\"max_cost_usd\\": null, \\"max_input_tokens\\": null, \\"max_output_tokens\\": null, '
    '\\"max_parallel\\": 4, \\"max_result_bytes\\": 65536, \\"max_retries\\": 3, '
    '\\"max_tool_calls\\": , \\"max_total_tokens\\": null, \\"max_turns\\": , '
    '\\"no_progress_after\\": 3, \\"tool_timeout_ms\\": null}","model":"","policy_revision":"",'
    '"policy_sha256":"sha256:","provider":"openai","provider":"anthropic","provider":"gemini",'
    '"reason":null,"registry_name":"","registry_path":"","registry_revision":"",'
    '"registry_sha256":"sha256:","settings_json":"{\\"model\\": \\"\\", \\"stream\\": false}",'
    '"source_json":"{\\"base_url\\": \\"https://api.openai.com/v1\\"}","state":"MODEL_REQUESTED",'
    '"subject":"operator","task":"","tenant":"default","transport":"live","updated_at":""}]'
    '"state":"COMPLETED","state":"WAITING_APPROVAL","state":"ESCALATED","state":"FAILED",'
    '"state":"INCOMPLETE","state":"REFUSED","state":"NO_PROGRESS","state":"BUDGET_EXHAUSTED",'
    '"reason":"completed",'
)
_TURN = (
    '["turn",{"created_at":"","detail":null,"error_json":null,"finish_reason":"completed",'
    '"idx":,"outcome":"TOOL_PROPOSALS","outcome":"FINAL_TEXT","request_items":,'
    '"request_sha256":"sha256:","response_id":"resp_","response_sha256":"sha256:","text":null,'
    '"tools_sha256":"sha256:","usage_json":"{\\"input_tokens\\": , \\"output_tokens\\": , '
    '\\"total_tokens\\": }"}]'
)
_CALL = (
    '["call",{"approval_id":null,"argument_error":null,"arguments_json":"{\\"'
    '"arguments_sha256":"sha256:","call_binding_sha256":null,"call_id":"call_",'
    '"finished_at":null,"idempotency_key":"idk_","model_result_json":null,"name":"",'
    '"protected_audit_json":null,"raw_arguments":"{\\"","response_id":"resp_",'
    '"result_sha256":null,"seq":0,"started_at":"","state":"EXECUTING","tool_sha256":"sha256:",'
    '"turn_idx":},["PROPOSED","APPROVED"]]["call",["resp_","call_"],{"call_binding_sha256":'
    '"sha256:","finished_at":"","model_result_json":"{\\"ok\\": true, \\"result\\": {\\"",'
    '"model_result_json":"{\\"error\\": {\\"code\\": \\"\\", \\"message\\": \\"\\"}, '
    '\\"ok\\": false}","protected_audit_json":"{\\"duration_ms\\": , \\"error\\": null, '
    '\\"result_bytes\\": , \\"status\\": \\"ok\\"}","result_sha256":"sha256:",'
    '"state":"SUCCEEDED"},"sha256:"]'
)
_TRANSITION = (
    '["items",{"items":["sha256:","sha256:"],"start":}]'
    '["transition",{"at":"","call_id":null,"id":,"kind":"operation","reason":null,'
    '"response_id":null,"source":"MODEL_REQUESTED","target":"VALIDATING"}]'
    '["transition",{"at":"","call_id":null,"id":,"kind":"operation","reason":null,'
    '"response_id":null,"source":"VALIDATING","target":"EXECUTING"}]'
    '["transition",{"at":"","call_id":null,"id":,"kind":"operation","reason":null,'
    '"response_id":null,"source":"EXECUTING","target":"RESULTS_READY"}]'
    '["transition",{"at":"","call_id":"call_","id":,"kind":"call","reason":'
    '"allowed by policy (approval: never)","response_id":"resp_","source":"PROPOSED",'
    '"target":"APPROVED"}]'
    '["transition",{"at":"","call_id":"call_","id":,"kind":"call","reason":"intent committed",'
    '"response_id":"resp_","source":"APPROVED","target":"EXECUTING"}]'
    '["transition",{"at":"","call_id":"call_","id":,"kind":"call","reason":null,'
    '"response_id":"resp_","source":"EXECUTING","target":"SUCCEEDED"}]'
    '["operation",[],{"reason":" result(s) sent back","state":"MODEL_REQUESTED","updated_at":""},'
    '"sha256:",["RESULTS_READY"]]'
    '{"call_id":null,"kind":"batch","operation_id":"op_","seq":,"v":4,"writes":[['
)

#: the first dictionary; its bytes must never change (a test pins its Adler-32)
RECORD_DICTIONARY_V1 = (_APPROVAL + _OPERATION + _TURN + _CALL + _TRANSITION).encode()

#: the dictionary new records are deflated with
RECORD_DICTIONARY = RECORD_DICTIONARY_V1

#: every dictionary a stored record may name, by its Adler-32 (the zlib header's DICTID)
DICTIONARIES: dict[int, bytes] = {zlib.adler32(RECORD_DICTIONARY_V1): RECORD_DICTIONARY_V1}
