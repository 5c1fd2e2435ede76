//! Per-QP counters, named as Linux rxe's `hw_counters` where one exists (docs/architecture.md §4),
//! so the NIC can aggregate them per port under the names `rdma statistic` shows.

/// Per-QP counters. All monotonically increasing.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Counters {
    /// Packets transmitted (requests and responses).
    pub sent_pkts: u64,
    /// Packets handed to `handle_packet` that were accepted for processing.
    pub rcvd_pkts: u64,
    /// Responder: duplicate requests (PSN before ePSN).
    pub duplicate_request: u64,
    /// Responder: requests ahead of ePSN (sequence gap).
    pub out_of_seq_request: u64,
    /// Requester: RNR NAKs received.
    pub rcvd_rnr_err: u64,
    /// Responder: RNR NAKs sent.
    pub send_rnr_err: u64,
    /// Requester: PSN sequence error NAKs received.
    pub rcvd_seq_err: u64,
    /// Responder: requests without AckReq whose ACK was coalesced into a later one.
    pub ack_deferred: u64,
    /// Requester: WRs failed with transport retry counter exceeded.
    pub retry_exceeded_err: u64,
    /// Requester: WRs failed with RNR retry counter exceeded.
    pub retry_rnr_exceeded_err: u64,
    /// Requester: retries started by a NAK or an implied NAK (not by the timer).
    pub completer_retry_err: u64,
    /// Local errors while sending (bad SGE, buffer too small, ...).
    pub send_err: u64,
    /// RDMA READ/WRITE requests started by this QP's requester.
    pub rdma_sends: u64,
    /// RDMA READ/WRITE requests executed by this QP's responder.
    pub rdma_recvs: u64,
    /// Packets sent again (PSN already sent before).
    pub retransmissions: u64,
    /// Local ACK timeouts that fired with work outstanding.
    pub local_ack_timeouts: u64,
    /// Requester: sequence NAKs / implied NAKs ignored because a retry was already started
    /// and nothing was acknowledged since.
    pub stale_naks: u64,
    /// Requester: retransmission-timer probes (a resend from the oldest unacknowledged PSN
    /// before the local ACK timeout; no retry used).
    pub rto_probes: u64,
    /// Requester: timeouts (local ACK timeouts and probes that went back) found spurious by
    /// an acknowledgement of a packet not resent since, and their window cut undone.
    pub spurious_timeouts: u64,
    /// Requester: NAK invalid request received.
    pub rcvd_nak_invalid_request: u64,
    /// Requester: NAK remote access error received.
    pub rcvd_nak_remote_access: u64,
    /// Requester: NAK remote operational error received (and unknown NAK codes).
    pub rcvd_nak_remote_op: u64,
    /// Responder: NAKs sent, all kinds except RNR.
    pub send_nak: u64,
    /// Requester: responses for PSNs never sent ("ghost" ACKs), dropped.
    pub ghost_responses: u64,
    /// Requester: responses older than the oldest unacknowledged PSN, dropped.
    pub duplicate_responses: u64,
    /// Packets dropped for any other reason (wrong state, transport, Q_Key, malformed).
    pub dropped_pkts: u64,
    /// UD/UC: packets dropped because no receive WQE was posted.
    pub rcv_no_wqe_drop: u64,
    /// UD: packets dropped for a Q_Key mismatch.
    pub qkey_violation: u64,
    /// CNPs received.
    pub rcvd_cnp: u64,
    /// Notification point: received RoCEv2 packets whose IP ECN field was CE (mlx5's
    /// `np_ecn_marked_roce_packets`).
    pub np_ecn_marked_roce_packets: u64,
    /// Notification point: CNPs sent (`np_cnp_sent`).
    pub np_cnp_sent: u64,
    /// Reaction point: CNPs that drove a DCQCN rate decrease (`rp_cnp_handled`).
    pub rp_cnp_handled: u64,
    /// Reaction point: CNPs ignored (congestion control off, a UD QP, or not sending:
    /// `rp_cnp_ignored`).
    pub rp_cnp_ignored: u64,
    /// Responder, selective repeat (docs/wire.md §5.6): requests ahead of ePSN kept for
    /// in-order processing once the gap before them fills.
    pub sr_out_of_order_kept: u64,
    /// Responder, selective repeat: requests ahead of ePSN dropped (beyond the reassembly
    /// window or store, or already kept).
    pub sr_out_of_order_dropped: u64,
    /// Responder, selective repeat: sequence NAKs (both kinds, also in `send_nak`).
    pub sr_naks_sent: u64,
    /// Responder, selective repeat: hole NAKs, naming a missing PSN after ePSN.
    pub sr_hole_naks_sent: u64,
    /// Requester, selective repeat: single packets resent for a sequence NAK or a timeout.
    pub sr_single_resends: u64,
    /// Requester, selective repeat: sequence NAKs ignored because the PSN was resent less
    /// than a round trip ago (or is no longer outstanding).
    pub sr_naks_ignored: u64,
}

impl Counters {
    /// `(name, value)` pairs in a fixed order, for aggregation and display.
    pub fn iter(&self) -> impl Iterator<Item = (&'static str, u64)> {
        [
            ("sent_pkts", self.sent_pkts),
            ("rcvd_pkts", self.rcvd_pkts),
            ("duplicate_request", self.duplicate_request),
            ("out_of_seq_request", self.out_of_seq_request),
            ("rcvd_rnr_err", self.rcvd_rnr_err),
            ("send_rnr_err", self.send_rnr_err),
            ("rcvd_seq_err", self.rcvd_seq_err),
            ("ack_deferred", self.ack_deferred),
            ("retry_exceeded_err", self.retry_exceeded_err),
            ("retry_rnr_exceeded_err", self.retry_rnr_exceeded_err),
            ("completer_retry_err", self.completer_retry_err),
            ("send_err", self.send_err),
            ("rdma_sends", self.rdma_sends),
            ("rdma_recvs", self.rdma_recvs),
            ("retransmissions", self.retransmissions),
            ("local_ack_timeouts", self.local_ack_timeouts),
            ("stale_naks", self.stale_naks),
            ("rto_probes", self.rto_probes),
            ("spurious_timeouts", self.spurious_timeouts),
            ("rcvd_nak_invalid_request", self.rcvd_nak_invalid_request),
            ("rcvd_nak_remote_access", self.rcvd_nak_remote_access),
            ("rcvd_nak_remote_op", self.rcvd_nak_remote_op),
            ("send_nak", self.send_nak),
            ("ghost_responses", self.ghost_responses),
            ("duplicate_responses", self.duplicate_responses),
            ("dropped_pkts", self.dropped_pkts),
            ("rcv_no_wqe_drop", self.rcv_no_wqe_drop),
            ("qkey_violation", self.qkey_violation),
            ("rcvd_cnp", self.rcvd_cnp),
            (
                "np_ecn_marked_roce_packets",
                self.np_ecn_marked_roce_packets,
            ),
            ("np_cnp_sent", self.np_cnp_sent),
            ("rp_cnp_handled", self.rp_cnp_handled),
            ("rp_cnp_ignored", self.rp_cnp_ignored),
            ("sr_out_of_order_kept", self.sr_out_of_order_kept),
            ("sr_out_of_order_dropped", self.sr_out_of_order_dropped),
            ("sr_naks_sent", self.sr_naks_sent),
            ("sr_hole_naks_sent", self.sr_hole_naks_sent),
            ("sr_single_resends", self.sr_single_resends),
            ("sr_naks_ignored", self.sr_naks_ignored),
        ]
        .into_iter()
    }

    /// Add every counter of `other` into `self` (per-port aggregation).
    pub fn accumulate(&mut self, other: &Counters) {
        let Counters {
            sent_pkts,
            rcvd_pkts,
            duplicate_request,
            out_of_seq_request,
            rcvd_rnr_err,
            send_rnr_err,
            rcvd_seq_err,
            ack_deferred,
            retry_exceeded_err,
            retry_rnr_exceeded_err,
            completer_retry_err,
            send_err,
            rdma_sends,
            rdma_recvs,
            retransmissions,
            local_ack_timeouts,
            stale_naks,
            rto_probes,
            spurious_timeouts,
            rcvd_nak_invalid_request,
            rcvd_nak_remote_access,
            rcvd_nak_remote_op,
            send_nak,
            ghost_responses,
            duplicate_responses,
            dropped_pkts,
            rcv_no_wqe_drop,
            qkey_violation,
            rcvd_cnp,
            np_ecn_marked_roce_packets,
            np_cnp_sent,
            rp_cnp_handled,
            rp_cnp_ignored,
            sr_out_of_order_kept,
            sr_out_of_order_dropped,
            sr_naks_sent,
            sr_hole_naks_sent,
            sr_single_resends,
            sr_naks_ignored,
        } = *other;
        self.sent_pkts += sent_pkts;
        self.rcvd_pkts += rcvd_pkts;
        self.duplicate_request += duplicate_request;
        self.out_of_seq_request += out_of_seq_request;
        self.rcvd_rnr_err += rcvd_rnr_err;
        self.send_rnr_err += send_rnr_err;
        self.rcvd_seq_err += rcvd_seq_err;
        self.ack_deferred += ack_deferred;
        self.retry_exceeded_err += retry_exceeded_err;
        self.retry_rnr_exceeded_err += retry_rnr_exceeded_err;
        self.completer_retry_err += completer_retry_err;
        self.send_err += send_err;
        self.rdma_sends += rdma_sends;
        self.rdma_recvs += rdma_recvs;
        self.retransmissions += retransmissions;
        self.local_ack_timeouts += local_ack_timeouts;
        self.stale_naks += stale_naks;
        self.rto_probes += rto_probes;
        self.spurious_timeouts += spurious_timeouts;
        self.rcvd_nak_invalid_request += rcvd_nak_invalid_request;
        self.rcvd_nak_remote_access += rcvd_nak_remote_access;
        self.rcvd_nak_remote_op += rcvd_nak_remote_op;
        self.send_nak += send_nak;
        self.ghost_responses += ghost_responses;
        self.duplicate_responses += duplicate_responses;
        self.dropped_pkts += dropped_pkts;
        self.rcv_no_wqe_drop += rcv_no_wqe_drop;
        self.qkey_violation += qkey_violation;
        self.rcvd_cnp += rcvd_cnp;
        self.np_ecn_marked_roce_packets += np_ecn_marked_roce_packets;
        self.np_cnp_sent += np_cnp_sent;
        self.rp_cnp_handled += rp_cnp_handled;
        self.rp_cnp_ignored += rp_cnp_ignored;
        self.sr_out_of_order_kept += sr_out_of_order_kept;
        self.sr_out_of_order_dropped += sr_out_of_order_dropped;
        self.sr_naks_sent += sr_naks_sent;
        self.sr_hole_naks_sent += sr_hole_naks_sent;
        self.sr_single_resends += sr_single_resends;
        self.sr_naks_ignored += sr_naks_ignored;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accumulate_and_iter_agree() {
        let a = Counters {
            sent_pkts: 3,
            rcvd_cnp: 2,
            np_cnp_sent: 5,
            rp_cnp_handled: 1,
            ..Counters::default()
        };
        let mut b = Counters {
            sent_pkts: 1,
            ..Counters::default()
        };
        b.accumulate(&a);
        b.accumulate(&a);
        assert_eq!(b.sent_pkts, 7);
        assert_eq!(b.rcvd_cnp, 4);
        let names: Vec<_> = b.iter().map(|(n, _)| n).collect();
        assert_eq!(names.len(), 39);
        assert_eq!((b.np_cnp_sent, b.rp_cnp_handled), (10, 2));
        assert_eq!(
            b.iter().find(|(n, _)| *n == "rcvd_cnp").map(|(_, v)| v),
            Some(4)
        );
    }
}
