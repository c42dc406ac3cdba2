"""Which of a run's records the timing models predict, and why each other is left out."""

from __future__ import annotations

import pandas as pd

__all__ = ["FROM_DATA", "modelled_only"]

# What a record trained from an image folder has that no model of its step counts.
FROM_DATA = ("trained from an image folder, whose decoding and augmenting on the host no timing "
             "model counts (they predict a step on synthetic data): measure the loader's rate "
             "with parbench loader")


def modelled_only(records: pd.DataFrame) -> tuple[pd.DataFrame, pd.DataFrame]:
    """The records whose data the models model (synthetic), and each other ok record with
    why (`not_predicted`: an image folder it trained from), each also printed."""
    why = {}
    for index, row in records[records["status"] == "ok"].iterrows():
        if row.get("data") not in (None, "synthetic") and not pd.isna(row.get("data")):
            print(f"left out: {row['strategy']} on {row['devices']} ({row['data']}): "
                  f"{FROM_DATA}")
            why[index] = FROM_DATA
    left = records.loc[list(why)].assign(not_predicted=list(why.values()))
    return records.drop(index=list(why)), left
