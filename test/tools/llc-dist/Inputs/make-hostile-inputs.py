"""Writes the hostile input files of hostile-inputs.test into DIR (a mutation sweep's findings,
issue #16): a config with a key twice, a config nested 100,000 deep, a config with 2^24 layers,
a Llama config with a subnormal rope_theta, device and topology files with a number too large for a double or nested 100,000 deep."""
import json
import os
import sys

out, models = sys.argv[1], sys.argv[2]
os.makedirs(out, exist_ok=True)
root = os.path.dirname(models)
base = open(os.path.join(models, "tiny-gpt2.json")).read().rstrip().rstrip("}")
deep = "[" * 100000 + "]" * 100000


def write(name, text):
    with open(os.path.join(out, name), "w") as f:
        f.write(text)


write("dup-key.json", base + ', "n_layer": 3}')
write("deep-config.json", base + ', "x": ' + deep + "}")
cfg = json.load(open(os.path.join(models, "tiny-gpt2.json")))
cfg["n_layer"] = 1 << 24
write("many-layers.json", json.dumps(cfg))
cfg = json.load(open(os.path.join(models, "tiny-gpt2.json")))
cfg["vocab_size"] = (1 << 63) - 1
write("huge-vocab.json", json.dumps(cfg))
cfg = json.load(open(os.path.join(models, "tiny-llama.json")))
cfg["rope_theta"] = 5e-324  # a double subnormal: positive, but 0 in the runtime's fp32
write("subnormal-theta.json", json.dumps(cfg))
device = open(os.path.join(root, "devices", "h100-80gb.json")).read()
write("huge-device.json", device.replace('"memory_gib": 80', '"memory_gib": 1e400', 1))
write("deep-device.json", device.replace('"name"', '"x": ' + deep + ', "name"', 1))
topo = open(os.path.join(root, "topologies", "dgx-h100.json")).read()
write("huge-topology.json", topo.replace('"intra_node_gb_s": 450', '"intra_node_gb_s": 1e400', 1))
