"""Connected components of an edge DataFrame by large-star / small-star, in plain DataFrame operations.

Kiveris et al., "Connected Components in MapReduce and Beyond" (SoCC 2014). With Γ(u) the
neighbours of u and m(u) = min(Γ(u) ∪ {u}):

* **large-star**: every u links each neighbour v > u to m(u);
* **small-star**: every u links itself and each neighbour v < u to m'(u) = min({v ∈ Γ(u): v <= u} ∪ {u}).

Both keep the components and lower labels; alternating them reaches a forest of stars, each centred
on its component's minimum, in O(log² n) rounds (a handful on near-duplicate graphs, whose components
are small). The job stops when every edge ``(hi, lo)`` points at a node that is nobody's ``hi`` and
every ``hi`` has one edge: then ``lo`` is the component's id for ``hi``. Nothing is collected on the
driver; each round's edges are checkpointed locally (to disk), so lineage (and planning time) stays flat.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

__all__ = ["connected_components"]

#: More rounds than this means something is wrong (2^30 nodes need fewer than 30 * 30 rounds).
_MAX_ROUNDS = 200


def connected_components(edges: DataFrame, a: str = "a", b: str = "b") -> DataFrame:
    """The component of every node that has an edge: ``DataFrame[gid long, comp long]``, comp = its minimum.

    Args:
        edges: Undirected edges as two long columns (either orientation; duplicates and self-loops allowed).
        a, b: Their names.

    Raises:
        RuntimeError: No star forest after ``_MAX_ROUNDS`` rounds (a bug, not a property of the data).
    """
    from pyspark import StorageLevel
    from pyspark.sql import functions as F

    def checkpoint(df: DataFrame) -> DataFrame:
        return df.localCheckpoint(eager=True, storageLevel=StorageLevel.DISK_ONLY)

    e = checkpoint(
        edges.where(F.col(a) != F.col(b))
        .select(F.greatest(a, b).alias("hi"), F.least(a, b).alias("lo"))
        .distinct()
    )
    for _ in range(_MAX_ROUNDS):
        # large-star
        both = e.select(F.col("hi").alias("u"), F.col("lo").alias("v")).unionByName(
            e.select(F.col("lo").alias("u"), F.col("hi").alias("v"))
        )
        low = both.groupBy("u").agg(F.least(F.min("v"), F.col("u")).alias("m"))
        large = both.where(F.col("v") > F.col("u")).join(low, "u").select(F.col("v").alias("hi"), F.col("m").alias("lo")).distinct()
        # small-star
        low = large.groupBy("hi").agg(F.min("lo").alias("m"))
        with_m = large.join(low, "hi")
        small = with_m.where(F.col("lo") != F.col("m")).select(F.col("lo").alias("hi"), F.col("m").alias("lo")).unionByName(
            low.select("hi", F.col("m").alias("lo"))
        )
        e = checkpoint(small.distinct())
        # a star forest: no edge's hi is another edge's lo, and every hi has one edge
        centres = e.select(F.col("lo").alias("hi"), F.lit(True).alias("centre")).distinct()
        unsettled = (
            e.join(centres, "hi", "left")
            .groupBy("hi")
            .agg(F.count("*").alias("edges"), F.max("centre").alias("centre"))
            .where((F.col("edges") > 1) | F.col("centre").isNotNull())
        )
        if unsettled.limit(1).count() == 0:
            return e.select(F.col("hi").alias("gid"), F.col("lo").alias("comp")).unionByName(
                e.select(F.col("lo").alias("gid"), F.col("lo").alias("comp")).distinct()
            )
    raise RuntimeError(f"connected components did not converge in {_MAX_ROUNDS} rounds")
