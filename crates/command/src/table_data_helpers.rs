//! Short constructors used by the generated `table_data.rs` (keeps that file compact).

use crate::reply::Reply;
use bytes::Bytes;

pub fn s(text: &'static str) -> Reply {
    Reply::Simple(Bytes::from_static(text.as_bytes()))
}
pub fn b(text: &'static str) -> Reply {
    Reply::Bulk(Bytes::from_static(text.as_bytes()))
}
pub fn i(n: i64) -> Reply {
    Reply::Int(n)
}
pub fn a(items: Vec<Reply>) -> Reply {
    Reply::Array(items)
}
pub fn st(items: Vec<Reply>) -> Reply {
    Reply::Set(items)
}
pub fn m(pairs: Vec<(Reply, Reply)>) -> Reply {
    Reply::Map(pairs)
}
