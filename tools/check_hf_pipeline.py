"""Check a trained run against Hugging Face Transformers' ``pipeline("translation")``.

Transformers 5 has no translation pipeline (the test suite runs its steps, tokenize, ``generate``
and decode, in ``tests/integration/test_export_transformers.py``); the 4.x series, the last that has it,
conflicts with the ``tokenizers`` and ``huggingface-hub`` versions Transformers 5 installs. So this
tool runs the pipeline in a child process whose ``PYTHONPATH`` starts with a directory holding
Transformers 4.x, made once with::

    pip install --no-deps --target DIR transformers==4.57.6 tokenizers==0.22.1 \\
        huggingface-hub==0.36.0 requests urllib3 idna charset-normalizer certifi

and compares its greedy translations of N sentences of a data file with ``Translator``'s::

    python tools/check_hf_pipeline.py --model RUN --data spa.txt --transformers4 DIR

It exits with status 1 when any translation differs, and prints those that do.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import subprocess
import sys
import tempfile

PIPELINE = """
import json, sys
import transformers
translate = transformers.pipeline("translation", model=sys.argv[1], device="cpu")
job = json.load(sys.stdin)
out = translate(job["sentences"], num_beams=1, max_new_tokens=job["cap"], batch_size=16)
print(json.dumps({"version": transformers.__version__, "out": [r["translation_text"] for r in out]}))
"""


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", required=True, help="run directory (its best checkpoint)")
    parser.add_argument("--data", required=True, help="a tab-separated file whose first column is the source")
    parser.add_argument("--transformers4", required=True, help="directory holding Transformers 4.x")
    parser.add_argument("--sentences", type=int, default=100)
    parser.add_argument("--max-output-tokens", type=int, default=64)
    parser.add_argument("--seed", type=int, default=7)
    args = parser.parse_args()

    from transformer_cpp.export import export_transformers
    from transformer_cpp.translate import Translator

    with open(args.data, encoding="utf-8") as f:
        lines = f.read().splitlines()
    rng = random.Random(args.seed)
    picked = sorted(rng.sample(range(len(lines)), args.sentences))
    sentences = [lines[i].split("\t")[0] for i in picked]
    ours = Translator.from_checkpoint(args.model, max_output_tokens=args.max_output_tokens).translate_batch(sentences)

    with tempfile.TemporaryDirectory() as tmp:
        out_dir = os.path.join(tmp, "hf")
        export_transformers(args.model, out_dir)
        env = dict(
            os.environ, PYTHONPATH=os.pathsep.join(filter(None, [args.transformers4, os.environ.get("PYTHONPATH")]))
        )
        proc = subprocess.run(
            [sys.executable, "-c", PIPELINE, out_dir],
            input=json.dumps({"sentences": sentences, "cap": args.max_output_tokens}),
            capture_output=True,
            text=True,
            env=env,
            check=False,
        )
    if proc.returncode != 0:
        print(proc.stderr[-3000:], file=sys.stderr)
        return 2
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    same = sum(a == b for a, b in zip(result["out"], ours))
    print(f"transformers {result['version']} pipeline('translation'), greedy: {same} of {len(ours)} identical")
    for s, theirs, mine in zip(sentences, result["out"], ours):
        if theirs != mine:
            print(f"  {s!r}\n    pipeline:   {theirs!r}\n    Translator: {mine!r}")
    return 0 if same == len(ours) else 1


if __name__ == "__main__":
    sys.exit(main())
