"""One client process of bench/load.py: routed prompts through llm's Python API.

    python bench/load_worker.py INDEX REQUESTS SEED T0 BASE GO_FILE

It reads its accounts and keys from the llm user directory the parent made (``LLM_USER_PATH``:
``accounts.json`` and ``keys.json``; no key is ever in argv or the environment), its ledger from
``LLM_ACCOUNTS_LEDGER`` and the stand-in from ``LLM_ACCOUNTS_BASE_URL``.

The ledger's clock is moved to ``BASE + (time.time() - T0)``: every process shares one real clock,
so instants still follow commit order, and the whole run lies in one credit period and one UTC
day whatever today's date (docs/architecture.md "Months and days").

Each prompt is sync or async, streamed or not, a new conversation or a turn of one this process
started, drawn from a generator seeded with SEED and INDEX. One JSON line per prompt, flushed, so
the parent keeps what a process did even when it kills it.
"""

import asyncio
import datetime as dt
import json
import os
import random
import sys
import time

MODEL = "claude-routed/claude-haiku-4-5"
WORDS = "ledger ceiling budget account stream settle admit credit period nanodollar".split()


def main(argv):
    index, requests, seed, t0, base, go = (
        int(argv[0]), int(argv[1]), int(argv[2]), float(argv[3]), argv[4], argv[5],
    )
    base_instant = dt.datetime.fromisoformat(base)

    from llm_accounts import clock

    clock.now = lambda: base_instant + dt.timedelta(seconds=time.time() - t0)

    import llm

    rng = random.Random(f"{seed}:{index}")
    sync_model, async_model = llm.get_model(MODEL), llm.get_async_model(MODEL)
    conversations = {False: [], True: []}
    loop = asyncio.new_event_loop()  # one loop, so async prompts share one connection pool
    print("ready", flush=True)
    while not os.path.exists(go):
        time.sleep(0.005)

    for number in range(requests):
        time.sleep(rng.uniform(0, 0.4))  # think time, so processes interleave
        use_async = rng.random() < 0.4
        stream = rng.random() < 0.5
        pool = conversations[use_async]
        continued = bool(pool) and rng.random() < 0.4
        options = {"max_tokens": 256, "retries": rng.choice((0, 0, 1))}
        text = f"p{index}-{number}: " + " ".join(rng.choice(WORDS) for _ in range(rng.randint(3, 40)))
        if continued:
            conversation = rng.choice(pool)
        else:
            conversation = (async_model if use_async else sync_model).conversation()
            pool.append(conversation)
        record = {"process": index, "n": number, "async": use_async, "stream": stream, "continued": continued}
        try:
            if use_async:
                record["chars"] = loop.run_until_complete(_ask_async(conversation, text, stream, options))
            else:
                response = conversation.prompt(text, stream=stream, **options)
                record["chars"] = len("".join(response) if stream else response.text())
            record["result"] = "ok"
        except llm.ModelError as error:
            record["result"] = getattr(error, "code", None) or "model_error"
        except Exception as error:  # a bug the parent reports: the type only, never a message
            record["result"] = f"exception:{type(error).__name__}"
        print(json.dumps(record), flush=True)
    loop.close()


async def _ask_async(conversation, text, stream, options):
    response = conversation.prompt(text, stream=stream, **options)
    if stream:
        return len("".join([chunk async for chunk in response]))
    return len(await response.text())


if __name__ == "__main__":
    main(sys.argv[1:])
