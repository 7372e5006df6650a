"""cuDF operations: hash groupby, sort, join, strings, scans (cudf::, cub::, thrust::, cuco:: kernels)."""
import cudf, numpy as np
rng = np.random.default_rng(0)
n = 1 << 20
df = cudf.DataFrame({"k": rng.integers(0, 1000, n), "v": rng.standard_normal(n), "w": rng.integers(0, 50, n)})
_ = df.groupby("k").agg({"v": ["sum", "mean", "max", "count", "std"]})
_ = df.groupby(["k", "w"]).v.sum()
_ = df.sort_values(["k", "v"])
right = cudf.DataFrame({"k": np.arange(1000), "name": [f"n{j}" for j in range(1000)]})
j = df.merge(right, on="k"); _ = j["name"].str.upper(); _ = j["name"].str.contains("n1")
_ = df["v"].cumsum(); _ = df["v"].rank(); _ = df["k"].unique(); _ = df["k"].value_counts()
_ = df.drop_duplicates("k"); _ = df[df.v > 0]; _ = df["v"].quantile(0.5)
print("cudf_many done")
