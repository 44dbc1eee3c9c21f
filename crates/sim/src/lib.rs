//! ringlet-sim (being written)
