"""Route tables for the gateway tests (one canary split, optional shadow and experiment salt)."""


def table(weights=(9000, 1000), *, salt="exp-1", shadow=False, version="v1"):
    names = ["stable", "canary", "arm-c"][: len(weights)]
    variants = [
        {
            "name": name,
            "model_version": str(i + 1),
            "triton_model": f"ctr__v{i + 1}__onnx",
            "role": "stable" if i == 0 else "canary",
            "weight_bp": w,
            "replicas": [f"http://127.0.0.1:{9000 + i}"],
        }
        for i, (name, w) in enumerate(zip(names, weights))
    ]
    if shadow:
        variants.append(
            {
                "name": "shadow",
                "model_version": "9",
                "triton_model": "ctr__v9__onnx",
                "role": "shadow",
                "weight_bp": 0,
                "replicas": ["http://127.0.0.1:9100"],
            }
        )
    return {"version": version, "endpoints": [{"name": "ctr", "salt": salt, "variants": variants}]}
