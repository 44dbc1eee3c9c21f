//! Passing file descriptors over a Unix stream socket (SCM_RIGHTS), and making read-only
//! descriptors of the engine's memfds.
//!
//! Why read-only *descriptors* and not just `PROT_READ` mappings: a client holding a writable
//! memfd could `mmap(PROT_WRITE)` or `mprotect` its way to writing the node's memory. A
//! descriptor opened `O_RDONLY` (re-opening `/proc/self/fd/N`, which makes a new open file
//! description of the same memfd) can only ever be mapped `PROT_READ` with `MAP_SHARED`: the
//! kernel refuses write mappings and `mprotect(PROT_WRITE)` with `EACCES`. Seals
//! (`F_SEAL_FUTURE_WRITE`) were the alternative; they would also forbid the engine's
//! hole punching (`fallocate`), which is how the data region shrinks.

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::net::UnixStream;

/// A read-only descriptor of the same file as `fd` (a memfd of this process).
///
/// # Errors
/// The OS error of `open` (e.g. `/proc` not mounted).
pub fn reopen_read_only(fd: RawFd) -> io::Result<OwnedFd> {
    let path = std::ffi::CString::new(format!("/proc/self/fd/{fd}"))
        .map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))?;
    // SAFETY: a valid C string; the result is checked.
    let r = unsafe { libc::open(path.as_ptr(), libc::O_RDONLY | libc::O_CLOEXEC) };
    if r < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: `r` is a fresh descriptor we own.
    Ok(unsafe { OwnedFd::from_raw_fd(r) })
}

/// Send `bytes` with `fds` attached, in one `sendmsg`. The whole of `bytes` must go in one
/// call (it is small: HELLO); a short send is an error.
///
/// # Errors
/// The OS error, or `WriteZero` on a short send.
pub fn send_with_fds(sock: &UnixStream, bytes: &[u8], fds: &[RawFd]) -> io::Result<()> {
    let fd_bytes = std::mem::size_of_val(fds);
    // SAFETY: CMSG_SPACE is a pure computation.
    let space = unsafe { libc::CMSG_SPACE(fd_bytes as u32) } as usize;
    // u64 storage keeps the control buffer aligned for cmsghdr.
    let mut control = vec![0u64; space.div_ceil(8)];
    let mut iov = libc::iovec {
        iov_base: bytes.as_ptr() as *mut libc::c_void,
        iov_len: bytes.len(),
    };
    // SAFETY: msghdr is plain data; every pointer set below outlives the sendmsg call.
    unsafe {
        let mut msg: libc::msghdr = std::mem::zeroed();
        msg.msg_iov = &mut iov;
        msg.msg_iovlen = 1;
        msg.msg_control = control.as_mut_ptr().cast();
        msg.msg_controllen = space as _;
        let cmsg = libc::CMSG_FIRSTHDR(&msg);
        if cmsg.is_null() {
            return Err(io::Error::from(io::ErrorKind::InvalidInput));
        }
        (*cmsg).cmsg_level = libc::SOL_SOCKET;
        (*cmsg).cmsg_type = libc::SCM_RIGHTS;
        (*cmsg).cmsg_len = libc::CMSG_LEN(fd_bytes as u32) as _;
        std::ptr::copy_nonoverlapping(fds.as_ptr().cast::<u8>(), libc::CMSG_DATA(cmsg), fd_bytes);
        let n = libc::sendmsg(sock.as_raw_fd(), &msg, libc::MSG_NOSIGNAL);
        if n < 0 {
            return Err(io::Error::last_os_error());
        }
        if n as usize != bytes.len() {
            return Err(io::Error::from(io::ErrorKind::WriteZero));
        }
    }
    Ok(())
}

/// Receive exactly `buf.len()` bytes whose first segment carries up to `max_fds`
/// descriptors. Descriptors arrive close-on-exec and are owned by the result.
///
/// # Errors
/// The OS error; `UnexpectedEof` if the peer closed first; `InvalidData` if more
/// descriptors than `max_fds` came (they are closed: truncated control data).
pub fn recv_with_fds(
    sock: &UnixStream,
    buf: &mut [u8],
    max_fds: usize,
) -> io::Result<Vec<OwnedFd>> {
    let fd_bytes = max_fds * std::mem::size_of::<RawFd>();
    // SAFETY: pure computation.
    let space = unsafe { libc::CMSG_SPACE(fd_bytes as u32) } as usize;
    let mut control = vec![0u64; space.div_ceil(8)];
    let mut fds = Vec::new();
    let mut got = 0usize;
    // Bounded: every iteration receives at least one byte or returns.
    while got < buf.len() {
        let mut iov = libc::iovec {
            iov_base: buf[got..].as_mut_ptr().cast(),
            iov_len: buf.len() - got,
        };
        // SAFETY: pointers valid for the call; the control data is parsed with the CMSG
        // macros within `msg_controllen`.
        unsafe {
            let mut msg: libc::msghdr = std::mem::zeroed();
            msg.msg_iov = &mut iov;
            msg.msg_iovlen = 1;
            msg.msg_control = control.as_mut_ptr().cast();
            msg.msg_controllen = space as _;
            let n = libc::recvmsg(sock.as_raw_fd(), &mut msg, libc::MSG_CMSG_CLOEXEC);
            if n < 0 {
                let e = io::Error::last_os_error();
                if e.kind() == io::ErrorKind::Interrupted {
                    continue;
                }
                return Err(e);
            }
            let mut cmsg = libc::CMSG_FIRSTHDR(&msg);
            while !cmsg.is_null() {
                if (*cmsg).cmsg_level == libc::SOL_SOCKET && (*cmsg).cmsg_type == libc::SCM_RIGHTS {
                    let data = libc::CMSG_DATA(cmsg);
                    let len = (*cmsg).cmsg_len as usize - (data as usize - cmsg as usize);
                    let count = len / std::mem::size_of::<RawFd>();
                    for i in 0..count {
                        let mut fd: RawFd = 0;
                        std::ptr::copy_nonoverlapping(
                            data.add(i * std::mem::size_of::<RawFd>()),
                            (&mut fd as *mut RawFd).cast::<u8>(),
                            std::mem::size_of::<RawFd>(),
                        );
                        fds.push(OwnedFd::from_raw_fd(fd));
                    }
                }
                cmsg = libc::CMSG_NXTHDR(&msg, cmsg);
            }
            if msg.msg_flags & libc::MSG_CTRUNC != 0 || fds.len() > max_fds {
                return Err(io::Error::new(
                    io::ErrorKind::InvalidData,
                    "too many descriptors",
                ));
            }
            if n == 0 {
                return Err(io::Error::from(io::ErrorKind::UnexpectedEof));
            }
            got += n as usize;
        }
    }
    Ok(fds)
}

/// `fstat` size of a descriptor (a region that grew is remapped).
///
/// # Errors
/// The OS error.
pub fn file_len(fd: RawFd) -> io::Result<u64> {
    // SAFETY: plain fstat into zeroed storage.
    unsafe {
        let mut st: libc::stat = std::mem::zeroed();
        if libc::fstat(fd, &mut st) != 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(st.st_size as u64)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{Read, Write};

    #[test]
    fn fds_cross_a_socket_pair() {
        let (a, b) = UnixStream::pair().unwrap();
        let (mut p1, mut p2) = UnixStream::pair().unwrap();
        send_with_fds(&a, b"hello", &[p1.as_raw_fd()]).unwrap();
        let mut buf = [0u8; 5];
        let fds = recv_with_fds(&b, &mut buf, 2).unwrap();
        assert_eq!(&buf, b"hello");
        assert_eq!(fds.len(), 1);
        // The received fd is the same socket: writing through it reaches p2.
        let mut dup = UnixStream::from(fds.into_iter().next().unwrap());
        dup.write_all(b"x").unwrap();
        let mut one = [0u8; 1];
        p2.read_exact(&mut one).unwrap();
        assert_eq!(&one, b"x");
        p1.write_all(b"y").unwrap();
    }

    #[test]
    fn read_only_reopen_refuses_writable_mappings() {
        // SAFETY: test syscalls on our own memfd; results checked.
        unsafe {
            let name = std::ffi::CString::new("t").unwrap();
            let fd = libc::memfd_create(name.as_ptr(), libc::MFD_CLOEXEC);
            assert!(fd >= 0);
            let fd = OwnedFd::from_raw_fd(fd);
            assert_eq!(libc::ftruncate(fd.as_raw_fd(), 4096), 0);
            let ro = reopen_read_only(fd.as_raw_fd()).unwrap();
            let p = libc::mmap(
                std::ptr::null_mut(),
                4096,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                ro.as_raw_fd(),
                0,
            );
            assert_eq!(p, libc::MAP_FAILED);
            assert_eq!(file_len(ro.as_raw_fd()).unwrap(), 4096);
        }
    }
}
