"""The wire: one Messages API request, from an ``llm`` prompt to bytes and back
(docs/security.md "Sending a key" and "Scrubbing"; docs/errors.md "From an answer to a code").

- ``payload``: the request body built from an ``llm`` prompt and frozen to the bytes that are
  quoted, digested and sent; ``structured``: ``--schema`` as native structured output;
- ``transport``: one physical HTTP attempt, where it goes and how it is signed (the only place a
  key is read into a header), bounded reads of the answer;
- ``sse``: the streamed format, SSE decoding, message assembly (usage merged by replacement) and
  what a well-formed answer is;
- ``events``: answers as llm StreamEvents, scrubbed of the attempt's key;
- ``scrub``: key scrubbing, so no run of the chosen key reaches output;
- ``classify``: what a failed attempt was (provider error types, rejection classes, failure
  classes, outcomes), in the closed sets of docs/errors.md.

Pure or per-attempt: nothing here reserves or settles; ``routing`` decides and ``models`` runs the
loop that calls these.
"""
