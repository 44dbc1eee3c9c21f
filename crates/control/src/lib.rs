//! ringlet-control (being written)
