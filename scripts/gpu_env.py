#!/usr/bin/env python3
"""The CUDA libraries of the machine the prepared GPU check runs on (DIR/run.sh; docs/gpu.md).

  gpu_env.py LIBDIR OUT_FILE BINARY...

Finds the directories of the machine's CUDA libraries -- the toolkit's (/usr/local/cuda/lib64 and
its siblings, $CUDA_HOME) and the nvidia-* wheels of python3's PyTorch environment (cuDNN, NCCL,
cuBLAS, the CUDA runtime; found through the `nvidia` package) -- and writes to OUT_FILE the
LD_LIBRARY_PATH the check's binaries run with: LIBDIR (the prepared directory's own libraries),
then the wheels' cuDNN and NCCL (the newest cuDNN on these machines; NCCL is only there), then the
toolkit, then the other wheels, then the machine's own LD_LIBRARY_PATH and /usr/local/nvidia/lib64
(the driver's libcuda); LIBDIR/compat (libstdc++ / libgcc_s of the build machine) only when
the machine's own are too old for a binary. Checks every BINARY with ldd under that path and prints
INFO lines (which cudart / cuBLASLt / cuDNN / NCCL each resolves to, with versions) and one FAIL
line if a library or a symbol version stays unresolved. Python standard library only.
"""
import glob
import os
import re
import subprocess
import sys

CUDA_FAMILY = ("libcuda.so", "libcudart.so", "libcublasLt.so", "libcublas.so", "libcudnn.so", "libnccl.so",
               "libnvrtc.so")


def wheel_lib_dirs():
    """[(kind, dir)] of the nvidia-* wheels' lib directories (kind: cudnn, nccl or other)."""
    try:
        import nvidia  # a namespace package of the nvidia-* wheels
        roots = list(nvidia.__path__)
    except ImportError:
        return []
    out = []
    for root in roots:
        for d, subdirs, files in os.walk(root):
            if d[len(root):].count(os.sep) > 3:
                subdirs[:] = []
                continue
            if os.path.basename(d) == "lib" and any(".so" in f for f in files):
                kind = ("cudnn" if any(f.startswith("libcudnn.so") for f in files) else
                        "nccl" if any(f.startswith("libnccl.so") for f in files) else "other")
                out.append((kind, d))
    return sorted(out)


def toolkit_lib_dirs():
    homes = [os.environ.get("CUDA_HOME"), os.environ.get("CUDA_PATH"), "/usr/local/cuda"]
    homes += sorted(glob.glob("/usr/local/cuda-*"), reverse=True)
    out = []
    for h in homes:
        if not h:
            continue
        for sub in ("lib64", "lib", "targets/x86_64-linux/lib", "targets/sbsa-linux/lib"):
            d = os.path.realpath(os.path.join(h, sub))
            if os.path.isdir(d) and d not in out and glob.glob(os.path.join(d, "libcudart.so*")):
                out.append(d)
        if out:
            break  # the first toolkit that has a CUDA runtime
    return out


def ldd(binary, path):
    env = dict(os.environ, LD_LIBRARY_PATH=path)
    try:
        p = subprocess.run(["ldd", binary], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                           env=env, timeout=60)
        return p.stdout
    except (OSError, subprocess.SubprocessError) as e:
        return f"ldd failed: {e}"


def unresolved(text):
    return [l.strip() for l in text.splitlines() if "not found" in l]


def pip_version(dist):
    try:
        from importlib import metadata
        return metadata.version(dist)
    except Exception:  # noqa: BLE001
        return None


def describe(lib, path):
    """'path (version)' of a resolved library."""
    real = os.path.realpath(path)
    m = re.search(r"\.so\.(\d+(?:\.\d+)+)$", real)
    ver = m.group(1) if m else None
    if "site-packages" in real or "dist-packages" in real:
        dists = {"libcudnn": ["nvidia-cudnn-cu13", "nvidia-cudnn-cu12"],
                 "libnccl": ["nvidia-nccl-cu13", "nvidia-nccl-cu12"],
                 "libcublas": ["nvidia-cublas", "nvidia-cublas-cu12"],
                 "libcudart": ["nvidia-cuda-runtime", "nvidia-cuda-runtime-cu12"]}
        for prefix, names in dists.items():
            if lib.startswith(prefix):
                for dist in names:
                    v = pip_version(dist)
                    if v:
                        ver = f"{v}, wheel {dist}"
                        break
                break
    return f"{path}" + (f" ({ver})" if ver else "")


def main():
    libdir, out_file, bins = sys.argv[1], sys.argv[2], sys.argv[3:]
    wheels = wheel_lib_dirs()
    toolkit = toolkit_lib_dirs()
    dirs = [libdir] + [d for k, d in wheels if k == "cudnn"] + [d for k, d in wheels if k == "nccl"]
    dirs += toolkit + [d for k, d in wheels if k == "other"]
    # Then what the machine already sets (the driver's libcuda may be found only through it), and
    # the driver's usual directory in containers.
    dirs += [d for d in os.environ.get("LD_LIBRARY_PATH", "").split(":") if d and d not in dirs]
    dirs += [d for d in ("/usr/local/nvidia/lib64", "/usr/local/nvidia/lib") if os.path.isdir(d) and d not in dirs]
    path = ":".join(dirs)
    compat = os.path.join(libdir, "compat")
    texts = {b: ldd(b, path) for b in bins}
    if any(unresolved(t) for t in texts.values()) and os.path.isdir(compat):
        path2 = ":".join([libdir, compat] + dirs[1:])
        texts2 = {b: ldd(b, path2) for b in bins}
        if sum(len(unresolved(t)) for t in texts2.values()) < sum(len(unresolved(t)) for t in texts.values()):
            path, texts = path2, texts2
            print("INFO libs: the machine's libstdc++ / libgcc_s are older than the build machine's: "
                  "using the prepared directory's (lib/compat)")
    with open(out_file, "w") as f:
        f.write(path + "\n")
    if any(t.startswith("ldd failed") for t in texts.values()):
        print("INFO libs: no ldd on this machine: the libraries are not checked before the runs")
    if not toolkit:
        print("INFO libs: no CUDA toolkit library directory found (/usr/local/cuda/lib64, $CUDA_HOME)")
    if not wheels:
        print("INFO libs: python3 has no nvidia-* wheels (import nvidia failed): cuDNN / NCCL from the system only")
    seen = {}
    for b, text in texts.items():
        for line in text.splitlines():
            m = re.match(r"\s*(\S+) => (\S+)", line)
            if m and m.group(1).startswith(CUDA_FAMILY) and m.group(2) != "not":
                seen.setdefault(m.group(1), m.group(2))
    for lib in sorted(seen):
        print(f"INFO libs: {lib} => {describe(lib, seen[lib])}")
    missing = sorted({f"{os.path.basename(b)}: {u}" for b, t in texts.items() for u in unresolved(t)})
    if missing:
        print("FAIL libs: unresolved with LD_LIBRARY_PATH=" + path + ": " + "; ".join(missing[:8]))
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
