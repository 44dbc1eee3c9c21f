//! ringlet-linearize (being written)
