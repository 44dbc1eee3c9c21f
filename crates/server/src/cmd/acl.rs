//! `ACL ...` on a single node: the subcommands are answered by `ringlet_command::acl` over
//! this node's table (`Shared::acl`); SETUSER and DELUSER change it in place (a cluster node
//! sends them to its control plane instead: crates/cluster). docs/design/acl.md.

use super::Ctx;
use crate::reply::Reply;
use ringlet_command::acl::{acl_command, genpass, AclAction};

/// A node that listens beyond loopback must keep authentication (its start was allowed
/// because a password was set): an ACL change that opens the default user is refused, as
/// `CONFIG SET requirepass ""` is.
const OPEN_DEFAULT_REFUSED: &str = "ERR the default user must keep a password on a node bound to a non-loopback address (`nopass` or `off`+`on` without one would serve anyone)";

pub fn acl(ctx: &mut Ctx<'_>, argv: &[&[u8]]) -> Reply {
    let users = ctx.shared.acl.snapshot();
    let loopback = ctx.shared.config.bind.is_loopback();
    match acl_command(&users, ctx.session.user.name(), argv) {
        AclAction::Reply(r) => r,
        AclAction::SetUser { name, rules } => match ctx.shared.acl.update(|u| {
            u.setuser(name, rules)?;
            if !loopback && u.default_user().open() {
                return Err(Reply::err(OPEN_DEFAULT_REFUSED));
            }
            Ok(())
        }) {
            Ok(()) => Reply::ok(),
            Err(e) => e,
        },
        AclAction::DelUser { names } => match ctx.shared.acl.update(|u| u.deluser(names)) {
            Ok(n) => Reply::Int(n),
            Err(e) => e,
        },
        AclAction::GenPass { bits } => {
            let mut random = vec![0u8; (bits as usize).div_ceil(8)];
            match getrandom::fill(&mut random) {
                Ok(()) => genpass(bits, &random),
                Err(e) => Reply::err_owned(format!("ERR no randomness for ACL GENPASS: {e}")),
            }
        }
    }
}
