# kv_corpus.py - samples a training text for bench/kv_train.py from a running kiln server: N stories
# of up to 480 tokens each (temperature 1, seed = the sample's number, so a rerun writes the same
# text), from a few story openings, 32 requests at a time (the server batches them). Each sample is
# written as one line of token ids (a JSON array, from the server's /tokenize), BOS not included; or,
# when OUT ends in .txt, as one line of text (an evaluation text: give it other seeds with SEED0).
#
#   python3 kv_corpus.py PORT N OUT.jsonl|OUT.txt [SEED0]
#
# The teacher is stories260K (bench/kv_model.sh starts it): its samples are a text that a larger model
# can learn in minutes, in the tokenizer both models share.
import json, sys, threading, urllib.request

port, n, out_path = sys.argv[1], int(sys.argv[2]), sys.argv[3]
seed0 = int(sys.argv[4]) if len(sys.argv) > 4 else 1
as_text = out_path.endswith(".txt")
openings = ["Once upon a time", "One day", "Lily", "Tom", "There was", "The little", "Sam and",
            "Once there was", ""]
lock = threading.Lock()
state = {"next": 0, "tokens": 0}
results = [None] * n


def post(path, body):
    req = urllib.request.Request(f"http://127.0.0.1:{port}{path}", json.dumps(body).encode(),
                                 {"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=600) as r:
        return json.loads(r.read())


def worker():
    while True:
        with lock:
            k = state["next"]
            if k >= n:
                return
            state["next"] += 1
        p = openings[k % len(openings)]
        j = post("/v1/completions", {"prompt": p, "max_tokens": 480, "temperature": 1.0, "seed": seed0 + k})
        text = (p + j["choices"][0]["text"]).replace("\n", " ").strip()
        ids = post("/tokenize", {"content": text})["tokens"]
        with lock:
            results[k] = text if as_text else ids
            state["tokens"] += len(ids)
            if (k + 1) % 500 == 0:
                print(f"{k + 1} samples, {state['tokens']} tokens", flush=True)


threads = [threading.Thread(target=worker) for _ in range(32)]
for t in threads:
    t.start()
for t in threads:
    t.join()
with open(out_path, "w") as f:
    for r in results:
        f.write((r if as_text else json.dumps(r)) + "\n")
print(f"{n} samples, {state['tokens']} tokens -> {out_path}", flush=True)
