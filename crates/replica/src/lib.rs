//! ringlet-replica (being written)
