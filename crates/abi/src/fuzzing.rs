//! Entry points shared by the `abi_command` fuzz target and the stable random-input tests.

use crate::cmd::{encode_refusal, Reply};
use crate::error::Result;
use crate::fastpath::{RecvWqe, SendWqe, WqeLimits, MAX_INLINE_DATA, MAX_SGE};
use crate::uverbs::{decode_poll_cq_resp, decode_request, ModifyQp, QueryQpResp, Request};
use zerocopy::FromBytes;

/// Decode arbitrary bytes as a command (header + payload), the way the control plane does.
///
/// Never panics on any input — except if the codec is inconsistent: a request that decodes
/// must re-encode to a message that decodes to the same request (that assertion is what the
/// fuzzer hunts for). The same bytes are also fed to the other decoders of untrusted bytes
/// (reply, POLL_CQ response, send/receive WQE) for coverage.
pub fn decode_command(data: &[u8]) -> Result<Request<'_>> {
    let _ = Reply::parse(data);
    if let Ok((_, wcs)) = decode_poll_cq_resp(data) {
        let _ = wcs.count();
    }
    let limits = WqeLimits {
        max_sge: MAX_SGE,
        max_inline: MAX_INLINE_DATA,
    };
    if let Ok((_, payload)) = SendWqe::parse(data, limits) {
        let _ = payload.sges().count();
    }
    let _ = RecvWqe::parse(data, MAX_SGE);
    if let Ok((resp, _)) = QueryQpResp::read_from_prefix(data) {
        // What the library makes of a QUERY_QP reply must survive its own re-encoding.
        if let Ok(a) = resp.attr() {
            assert_eq!(QueryQpResp::from(&a).attr(), Ok(a), "query_qp attr codec");
        }
    }

    let (frame, req) = decode_request(data)?;
    if let Request::PostSend(_, list) = req {
        let _ = list
            .send_wrs()
            .map(|(_, s)| s.iter().count())
            .sum::<usize>();
    }
    if let Request::ModifyQp(m) = &req {
        // The control plane's decode and value checks, and the attr codec's stability.
        if let Ok(a) = m.attr() {
            let limits = crate::AttrLimits {
                max_rd_atomic: 128,
                pkey_tbl_len: 1,
            };
            let _ = a.check(m.mask(), &limits);
            let again = ModifyQp::new(m.qp_handle, &a, m.mask(), m.flags);
            assert_eq!(again.attr(), Ok(a), "modify_qp attr codec");
        }
    }
    let mut again = Vec::new();
    req.encode(&mut again)
        .expect("a decoded request re-encodes");
    let (_, req2) = decode_request(&again).expect("a re-encoded request decodes");
    assert_eq!(req, req2, "decode/encode/decode is not stable");
    assert!(
        frame.response_capacity() >= Request::response_sizes(req.command()).map_or(0, |(c, _)| c)
    );
    Ok(req)
}

/// Decode arbitrary bytes as a reply (header, response or errno and its reason), the way the
/// library does. Never panics — except if the reason codec is inconsistent: a decoded
/// reason must re-encode to the same bytes.
pub fn decode_reply(data: &[u8]) -> Result<Reply<'_>> {
    let r = Reply::parse(data)?;
    if let (Err(errno), Some(reason)) = (r.result, r.reason) {
        let mut again = Vec::new();
        encode_refusal(r.command, errno, reason.rule, reason.text, &mut again);
        assert_eq!(again, data, "reason decode/encode is not stable");
    }
    Ok(r)
}

/// Decode arbitrary bytes as a message to or from `uroced` ([`crate::daemon`]), as the
/// daemon reads a client's request. Never panics — except if the codec is inconsistent:
/// what decodes must re-encode to the same bytes.
pub fn decode_daemon_message(data: &[u8]) -> Option<crate::daemon::Msg> {
    let m = crate::daemon::decode(data).ok()?;
    assert_eq!(
        crate::daemon::encode(&m),
        data,
        "daemon message decode/encode is not stable"
    );
    Some(m)
}
