// Near-memory compare-and-swap (mCAS) unit: the memory-side logic of paper §4 / Figure 6 for CXL
// devices without inter-host cache coherence (docs/design.md §9).
//
// Protocol. A requester (one host thread, identified by its slot) first sends a spwr ("special
// write") carrying a 64-byte line {expected, swap, target, requester id}; the unit parks those
// operands in the register of that requester. A later sprd ("special read") from the same requester
// triggers the operation: the unit reads the target word from device memory, compares it with the
// expected value, writes the swap value when they are equal, and answers {previous value, success}.
//
// Rules that make the operation atomic with respect to every other requester:
//   1. sprds are served one at a time, so the read-compare-write of one CAS never interleaves with
//      another CAS's memory accesses.
//   2. Conflict rule: when a CAS completes (its compare result is known, success or not), every
//      other requester whose operands are parked for the same word is marked failed; its sprd then
//      answers failure with the word's value at that moment (the value just read, or the swap
//      value just written) without touching memory. This is the paper's "at the end of each sprd
//      ... return mCAS failure for the competing spwr or sprd": at most one spwr/sprd pair per
//      word is ever decided against a given memory value. Such a failure can carry a previous value
//      equal to the expected one (a spurious failure, as with a weak CAS); a client that wants a
//      strong CAS retries while the previous value equals its expected value.
//   3. Stall after success: from a successful compare until memory has acknowledged the swap
//      value, the unit accepts no request at all, so nothing can observe the word between the
//      decision and the write. spwrs are otherwise accepted at any time, also while a sprd waits for
//      its read, which is when they can be caught by rule 2.
//
// Bad input never indexes out of range and never touches memory: a spwr whose requester id is not
// below NUM_REQUESTERS is dropped (spwr_dropped pulses); a sprd with such an id, with no parked
// operands, or whose target is misaligned or beyond cfg_words answers with an error code
// (mcas_pkg) instead of a result.
//
// Channels use valid/ready handshakes (a transfer happens on a rising edge where both are high;
// valid must not wait for ready). The memory port carries at most one request at a time, and its
// response (read data, or the write acknowledgement) must come at least one cycle after the request
// transfer; the latency is otherwise free (mcas_mem models a fixed one).
//
// Package names are spelled out (mcas_pkg::...) rather than imported: Yosys 0.23, which checks the
// formal properties below (script/fpga.sh formal), parses no `import` in or after a module header.
module mcas_unit #(
    // Number of requesters (host thread slots), one operand register each.
    parameter int NUM_REQUESTERS = 64,
    // Word-address width of the memory port: the device memory holds up to 2**MEM_ADDR_W 8-byte words.
    parameter int MEM_ADDR_W = 32
) (
    input logic clk,
    input logic rst,  // synchronous, active high: forgets every parked operand

    // Size of the device memory behind the memory port, in 8-byte words (a configuration register on
    // a device; at most 2**MEM_ADDR_W). Targets at or beyond 8 * cfg_words bytes are rejected.
    input logic [63:0] cfg_words,

    // Requests: a spwr (req_spwr = 1) carries req_line; a sprd (req_spwr = 0) names its requester in
    // req_id, which the bus adapter decodes from the sprd slot's address (a read carries no data).
    input  logic                                req_valid,
    output logic                                req_ready,
    input  logic                                req_spwr,
    input  logic [                        63:0] req_id,
    // verilator lint_off UNUSEDSIGNAL
    // Bytes 32-63 of the line are padding in the wire format.
    input  logic [mcas_pkg::MCAS_LINE_BITS-1:0] req_line,
    // verilator lint_on UNUSEDSIGNAL

    // Answers to sprds, in the order the sprds were accepted.
    output logic                                  rsp_valid,
    input  logic                                  rsp_ready,
    output logic [                          63:0] rsp_id,
    output logic [mcas_pkg::MCAS_ANSWER_BITS-1:0] rsp_line,
    output logic [                           1:0] rsp_error,

    // One-cycle pulse after a spwr with an out-of-range requester id was dropped.
    output logic spwr_dropped,

    // Device memory, 8-byte words.
    output logic                  mem_req_valid,
    input  logic                  mem_req_ready,
    output logic                  mem_req_write,
    output logic [MEM_ADDR_W-1:0] mem_req_addr,
    output logic [          63:0] mem_req_wdata,
    input  logic                  mem_rsp_valid,
    input  logic [          63:0] mem_rsp_rdata
);

  localparam int IDW = NUM_REQUESTERS > 1 ? $clog2(NUM_REQUESTERS) : 1;

  // Parameter checks stop the simulation at time 0: Icarus 11 does not parse elaboration-time $error.
  if (NUM_REQUESTERS < 1) begin : g_bad_requesters
    initial $fatal(1, "mcas_unit: NUM_REQUESTERS must be at least 1");
  end
  // A word address must fit the 61 word bits of a 64-bit byte address, with one to spare for the
  // bounds test below.
  if (MEM_ADDR_W < 1 || MEM_ADDR_W > 60) begin : g_bad_addr_width
    initial $fatal(1, "mcas_unit: MEM_ADDR_W must be between 1 and 60");
  end

  // ---- Request decoding ----------------------------------------------------------------------

  wire [63:0] line_expected = req_line[63:0];
  wire [63:0] line_swap = req_line[127:64];
  wire [63:0] line_target = req_line[191:128];
  wire [63:0] line_id = req_line[255:192];

  // The full 64-bit id is compared, never a truncated index: id NUM_REQUESTERS + k must not land in
  // register k (the published prototype overran its slot array this way, docs/design.md §14.7).
  wire spwr_id_ok = line_id < 64'(NUM_REQUESTERS);
  wire sprd_id_ok = req_id < 64'(NUM_REQUESTERS);
  wire [IDW-1:0] spwr_idx = line_id[IDW-1:0];
  wire [IDW-1:0] sprd_idx = req_id[IDW-1:0];

  // Aligned and inside the device memory; the high-bit test keeps the word address exact even if
  // cfg_words is set beyond what MEM_ADDR_W can address.
  wire [60:0] line_word = line_target[63:3];
  wire target_ok = line_target[2:0] == 3'b0 && line_word[60:MEM_ADDR_W] == '0 &&
      {3'b0, line_word} < cfg_words;

  // ---- Operand registers, one per requester ---------------------------------------------------
  //
  // parked[i]: operands of requester i await its sprd. failed[i]: a CAS on the same word completed
  // after they were parked (rule 2); fail_value[i] is the word's value at that completion.
  // bad_target[i]: the spwr's target was rejected; the sprd reports it.

  logic [NUM_REQUESTERS-1:0] parked, failed, bad_target;
  logic [63:0] op_expected[NUM_REQUESTERS];
  logic [63:0] op_swap[NUM_REQUESTERS];
  logic [MEM_ADDR_W-1:0] op_word[NUM_REQUESTERS];
  logic [63:0] fail_value[NUM_REQUESTERS];

  // ---- The sprd being served ------------------------------------------------------------------

  typedef enum logic [2:0] {
    S_IDLE,     // ready for a sprd
    S_RD_REQ,   // read of the target word offered to memory
    S_RD_WAIT,  // waiting for the read data
    S_WR_REQ,   // compare succeeded: write of the swap value offered to memory (stall)
    S_WR_WAIT,  // waiting for the write acknowledgement (stall)
    S_ANSWER    // answer offered on the response channel
  } state_e;

  state_e state;
  logic [MEM_ADDR_W-1:0] cur_word;
  logic [63:0] cur_expected, cur_swap;
  logic [63:0] ans_prev;
  logic ans_success;
  logic [1:0] ans_error;

  wire stalled = state == S_WR_REQ || state == S_WR_WAIT;
  assign req_ready = req_spwr ? !stalled : state == S_IDLE;
  wire spwr_fire = req_valid && req_ready && req_spwr;
  wire sprd_fire = req_valid && req_ready && !req_spwr;

  // The CAS decides in the cycle its read data arrives.
  wire decide = state == S_RD_WAIT && mem_rsp_valid;
  wire match = mem_rsp_rdata == cur_expected;
  wire [63:0] word_after = match ? cur_swap : mem_rsp_rdata;

  // Requesters failed by the CAS deciding in this cycle (rule 2). The requester being served is not
  // among them: its register was released when its sprd was accepted. A register with a bad target
  // may be marked too; its sprd reports the bad target first.
  logic [NUM_REQUESTERS-1:0] loses;
  always_comb begin
    for (int j = 0; j < NUM_REQUESTERS; j++) begin
      loses[j] = decide && parked[j] && !failed[j] && op_word[j] == cur_word;
    end
  end

  // Operand flags. Within one edge the order of the statements is the order of the events: a
  // completing CAS fails the others first, then a sprd takes its requester's operands, then a spwr
  // parks new ones, so a spwr accepted in the deciding cycle counts as arriving after the decision.
  always_ff @(posedge clk) begin
    if (rst) begin
      parked <= '0;
      failed <= '0;
      bad_target <= '0;
    end else begin
      failed <= failed | loses;
      if (sprd_fire && sprd_id_ok) begin
        parked[sprd_idx] <= 1'b0;
      end
      if (spwr_fire && spwr_id_ok) begin
        parked[spwr_idx] <= 1'b1;
        failed[spwr_idx] <= 1'b0;
        bad_target[spwr_idx] <= !target_ok;
      end
    end
  end

  // Operand values: no reset needed, they are read only while their parked flag is set.
  always_ff @(posedge clk) begin
    for (int j = 0; j < NUM_REQUESTERS; j++) begin
      if (loses[j]) fail_value[j] <= word_after;
    end
    if (spwr_fire && spwr_id_ok) begin
      op_expected[spwr_idx] <= line_expected;
      op_swap[spwr_idx] <= line_swap;
      op_word[spwr_idx] <= line_word[MEM_ADDR_W-1:0];
    end
  end

  always_ff @(posedge clk) begin
    if (rst) begin
      state <= S_IDLE;
      spwr_dropped <= 1'b0;
    end else begin
      spwr_dropped <= spwr_fire && !spwr_id_ok;
      case (state)
        S_IDLE:
        if (sprd_fire) begin
          rsp_id <= req_id;
          ans_prev <= '0;
          ans_success <= 1'b0;
          ans_error <= mcas_pkg::MCAS_ERR_NONE;
          if (!sprd_id_ok) begin
            ans_error <= mcas_pkg::MCAS_ERR_BAD_ID;
            state <= S_ANSWER;
          end else if (!parked[sprd_idx]) begin
            ans_error <= mcas_pkg::MCAS_ERR_NO_OPERANDS;
            state <= S_ANSWER;
          end else if (bad_target[sprd_idx]) begin
            ans_error <= mcas_pkg::MCAS_ERR_BAD_TARGET;
            state <= S_ANSWER;
          end else if (failed[sprd_idx]) begin
            ans_prev <= fail_value[sprd_idx];
            state <= S_ANSWER;
          end else begin
            cur_word <= op_word[sprd_idx];
            cur_expected <= op_expected[sprd_idx];
            cur_swap <= op_swap[sprd_idx];
            state <= S_RD_REQ;
          end
        end
        S_RD_REQ: if (mem_req_ready) state <= S_RD_WAIT;
        S_RD_WAIT:
        if (decide) begin
          ans_prev <= mem_rsp_rdata;
          ans_success <= match;
          state <= match ? S_WR_REQ : S_ANSWER;
        end
        S_WR_REQ: if (mem_req_ready) state <= S_WR_WAIT;
        S_WR_WAIT: if (mem_rsp_valid) state <= S_ANSWER;
        S_ANSWER: if (rsp_ready) state <= S_IDLE;
        default: state <= S_IDLE;
      endcase
    end
  end

  assign mem_req_valid = state == S_RD_REQ || state == S_WR_REQ;
  assign mem_req_write = state == S_WR_REQ;
  assign mem_req_addr = cur_word;
  assign mem_req_wdata = cur_swap;

  assign rsp_valid = state == S_ANSWER;
  assign rsp_line = {63'b0, ans_success, ans_prev};
  assign rsp_error = ans_error;

`ifdef FORMAL
  // ---- Formal properties (script/fpga.sh formal; docs/design.md §9.2) -------------------------
  //
  // Checked with Yosys, ABC and yosys-smtbmc on a small instance (3 requesters, 4 memory words: an
  // id of 3 still fits the 2-bit index and 4 wraps to 0, so truncation would show); fpga/README.md,
  // "Formal", states what is proven. Three parts:
  //   * assumptions on the environment: reset in the first cycle, a memory that accepts a request
  //     within F_WAIT cycles and answers it 1..F_LAT cycles after the transfer, and the contents of
  //     one memory word at a solver-chosen address (f_addr) that only the unit's writes change;
  //     every other input (requests, back-pressure on answers, cfg_words) is free in every cycle;
  //   * a reference model written from the port rules (fpga/README.md, "Rules"), not from the
  //     registers above: what each requester has parked, which parked requests a decision has
  //     failed, and what the sprd in service must answer;
  //   * assertions, p_* on ports only (the properties), i_* tying the registers to the reference
  //     (invariants for k-induction; a BMC would need none of them).
  // The p_* groups, by name prefix: p_response (bounded response), p_write (exact write, and
  // exact read), p_conflict (Figure 6 rule), p_shadow (no lost update), p_reject (out-of-range
  // ids and targets), p_stall (stall after success).

`ifndef MCAS_F_WAIT
`define MCAS_F_WAIT 1
`endif
`ifndef MCAS_F_LAT
`define MCAS_F_LAT 2
`endif
  // Longest memory back-pressure, in cycles, and longest request-to-response latency (at least 1).
  localparam int F_WAIT = `MCAS_F_WAIT;
  localparam int F_LAT = `MCAS_F_LAT;
  // Cycles from a sprd's acceptance to its answer being offered, at most: a read and a write, each
  // offered the cycle after the step before it, waiting up to F_WAIT cycles to be accepted and
  // F_LAT for the response, then the answer the cycle after the write's acknowledgement. With
  // F_WAIT = 0 this is the 2 x latency + 2 of fpga/README.md.
  localparam int F_BOUND = 2 * (F_WAIT + F_LAT) + 2;

  // Answer classes of the sprd in service, from the reference model's state at its acceptance.
  localparam logic [2:0] F_BAD_ID = 3'd0, F_NO_OPS = 3'd1, F_BAD_TGT = 3'd2, F_LOST = 3'd3,
      F_CAS = 3'd4;

  logic f_past_valid = 1'b0;
  always_ff @(posedge clk) f_past_valid <= 1'b1;
  always_comb if (!f_past_valid) assume (rst);

  // ---- Environment: the memory port ----
  // f_mem_busy: a request was transferred and its response has not come (set from the cycle after
  // the transfer, so a response can never come in the transfer's own cycle).
  logic f_mem_busy = 1'b0;
  logic f_mem_wr;
  logic [MEM_ADDR_W-1:0] f_mem_addr;
  logic [7:0] f_mem_age, f_mreq_wait;
  (* anyconst *) logic [MEM_ADDR_W-1:0] f_addr;
  logic [63:0] f_word;  // the memory word at f_addr; no initial value: any content
  logic [63:0] f_wdata;  // the data of the write in flight
  // Memory shares the unit's reset: what the port offers during reset cycles is not taken.
  wire f_mreq_fire = mem_req_valid && mem_req_ready && !rst;

  always_comb begin
    if (!f_mem_busy) assume (!mem_rsp_valid);
    if (f_mem_busy && f_mem_age >= 8'(F_LAT)) assume (mem_rsp_valid);
    if (mem_req_valid && !rst && f_mreq_wait >= 8'(F_WAIT)) assume (mem_req_ready);
    if (f_mem_busy && !f_mem_wr && f_mem_addr == f_addr) assume (mem_rsp_rdata == f_word);
    // A reset comes only while memory has nothing in flight (a response to a request from before
    // the reset would be taken for the answer to a new one).
    if (f_mem_busy) assume (!rst);
  end

  always_ff @(posedge clk) begin
    if (f_mreq_fire) begin
      f_mem_busy <= 1'b1;
      f_mem_wr <= mem_req_write;
      f_mem_addr <= mem_req_addr;
      f_mem_age <= 8'd1;
      f_wdata <= mem_req_wdata;
    end else if (mem_rsp_valid) begin
      f_mem_busy <= 1'b0;
    end else if (f_mem_age != 8'hff) begin
      f_mem_age <= f_mem_age + 8'd1;
    end
    f_mreq_wait <= mem_req_valid && !mem_req_ready && !rst ? f_mreq_wait + 8'd1 : 8'd0;
    // The write takes effect when memory acknowledges it.
    if (mem_rsp_valid && f_mem_busy && f_mem_wr && f_mem_addr == f_addr) f_word <= f_wdata;
  end

  // ---- Reference model: the port rules ----
  // Fields of the spwr line, decoded apart from the RTL's own wires.
  wire [63:0] f_l_exp = req_line[0+:64];
  wire [63:0] f_l_swp = req_line[64+:64];
  wire [63:0] f_l_tgt = req_line[128+:64];
  wire [63:0] f_l_id = req_line[192+:64];
  // In range: 8-byte aligned, below 8 * cfg_words bytes (67-bit arithmetic, no overflow) and below
  // the 8 * 2**MEM_ADDR_W bytes the memory port can address.
  wire f_l_tgt_ok = f_l_tgt % 8 == 0 && {3'b0, f_l_tgt} < {cfg_words, 3'b0} &&
      (f_l_tgt >> (MEM_ADDR_W + 3)) == 0;
  wire f_spwr = req_valid && req_ready && req_spwr && !rst;
  wire f_sprd = req_valid && req_ready && !req_spwr && !rst;
  wire f_spwr_in = f_spwr && f_l_id < NUM_REQUESTERS;
  wire f_sprd_in = f_sprd && req_id < NUM_REQUESTERS;

  // Per requester: parked operands, and whether (and with which value) a decision failed them.
  logic [NUM_REQUESTERS-1:0] f_parked, f_lost, f_tgt_ok;
  logic [63:0] f_exp[NUM_REQUESTERS];
  logic [63:0] f_swp[NUM_REQUESTERS];
  logic [63:0] f_lost_val[NUM_REQUESTERS];
  logic [MEM_ADDR_W-1:0] f_wd[NUM_REQUESTERS];

  // The sprd in service, from its acceptance until its answer is taken.
  logic f_busy;
  logic [2:0] f_kind;
  logic [63:0] f_id, f_cexp, f_cswp, f_clost, f_rdata;
  logic [MEM_ADDR_W-1:0] f_cword;
  logic f_rd_req, f_rd_done, f_wr_req, f_wr_done;
  logic f_stall;  // from a successful compare until the write acknowledgement
  logic [7:0] f_age;  // cycles since acceptance, while the answer is not offered
  logic [63:0] f_shadow;  // the word at f_addr as successful answers say it is
  logic f_dropped;  // a spwr with an out-of-range id was accepted in the previous cycle

  // The decision of the CAS in service: its read data arrives.
  wire f_decide = f_busy && f_mem_busy && !f_mem_wr && mem_rsp_valid;
  wire f_match = mem_rsp_rdata == f_cexp;
  wire f_rsp_fire = rsp_valid && rsp_ready;
  wire [IDW-1:0] f_sidx = req_id[IDW-1:0];
  wire [IDW-1:0] f_widx = f_l_id[IDW-1:0];

  always_ff @(posedge clk) begin
    if (rst) begin
      f_parked <= '0;
      f_lost <= '0;
      f_busy <= 1'b0;
      f_stall <= 1'b0;
      f_dropped <= 1'b0;
      f_shadow <= f_word;
    end else begin
      f_dropped <= f_spwr && !f_spwr_in;
      // Rule 2 first: every other request parked on the decided word fails, with the word's value
      // after the decision.
      if (f_decide) begin
        for (int j = 0; j < NUM_REQUESTERS; j++) begin
          if (f_parked[j] && f_tgt_ok[j] && !f_lost[j] && f_wd[j] == f_cword) begin
            f_lost[j] <= 1'b1;
            f_lost_val[j] <= f_match ? f_cswp : mem_rsp_rdata;
          end
        end
        f_rd_done <= 1'b1;
        f_rdata <= mem_rsp_rdata;
        f_stall <= f_match;
      end
      if (f_busy && f_mem_busy && f_mem_wr && mem_rsp_valid) begin
        f_wr_done <= 1'b1;
        f_stall <= 1'b0;
      end
      if (f_mreq_fire) begin
        if (mem_req_write) f_wr_req <= 1'b1;
        else f_rd_req <= 1'b1;
      end
      if (f_busy && !rsp_valid && f_age != 8'hff) f_age <= f_age + 8'd1;
      if (f_rsp_fire) begin
        f_busy <= 1'b0;
        // The shadow: only a successful answer for the word changes it (to the swap value).
        if (rsp_line[64] && f_kind == F_CAS && f_cword == f_addr) f_shadow <= f_cswp;
      end
      // Rule 1: a sprd takes its requester's operands.
      if (f_sprd) begin
        f_busy <= 1'b1;
        f_id <= req_id;
        f_age <= 8'd0;
        {f_rd_req, f_rd_done, f_wr_req, f_wr_done} <= '0;
        if (!f_sprd_in) f_kind <= F_BAD_ID;
        else if (!f_parked[f_sidx]) f_kind <= F_NO_OPS;
        else if (!f_tgt_ok[f_sidx]) f_kind <= F_BAD_TGT;
        else if (f_lost[f_sidx]) f_kind <= F_LOST;
        else f_kind <= F_CAS;
        if (f_sprd_in) begin
          f_parked[f_sidx] <= 1'b0;
          f_cexp <= f_exp[f_sidx];
          f_cswp <= f_swp[f_sidx];
          f_cword <= f_wd[f_sidx];
          f_clost <= f_lost_val[f_sidx];
        end
      end
      // A spwr parks after any decision of the same cycle (rule 2's last sentence).
      if (f_spwr_in) begin
        f_parked[f_widx] <= 1'b1;
        f_lost[f_widx] <= 1'b0;
        f_tgt_ok[f_widx] <= f_l_tgt_ok;
        f_exp[f_widx] <= f_l_exp;
        f_swp[f_widx] <= f_l_swp;
        f_wd[f_widx] <= MEM_ADDR_W'(f_l_tgt >> 3);
      end
    end
  end

  // Named for the counterexample waveforms (script/fpga.sh formal draws one).
  (* keep *) wire [63:0] f_requester = req_spwr ? f_l_id : req_id;
  (* keep *) wire f_rsp_success = rsp_line[64];
  (* keep *) wire [63:0] f_rsp_prev = rsp_line[63:0];

  // ---- Properties ----
  always_comb begin
    if (f_past_valid && !rst) begin
      // Bounded response: every accepted sprd is answered, F_BOUND cycles after at the latest, and
      // nothing is answered that was not asked; answers carry their sprd's id, one sprd at a time.
      if (f_busy && !rsp_valid) p_response_bound : assert (f_age < 8'(F_BOUND));
      if (rsp_valid) p_response_asked : assert (f_busy && rsp_id == f_id);
      if (!req_spwr) p_response_sprd_ready : assert (req_ready == !f_busy);

      // Exact write: memory sees one read of the served CAS's word, and a write only after that
      // read returned the expected value: once, of the swap value, to that word. Nothing else.
      if (mem_req_valid) p_write_only_cas : assert (f_busy && f_kind == F_CAS);
      if (mem_req_valid && !mem_req_write)
        p_write_read_exact : assert (!f_rd_req && mem_req_addr == f_cword);
      if (mem_req_valid && mem_req_write)
        p_write_exact :
        assert (f_rd_done && f_rdata == f_cexp && !f_wr_req && mem_req_addr == f_cword &&
                mem_req_wdata == f_cswp);
      if (rsp_valid && f_kind == F_CAS)
        p_write_cas_answer :
        assert (rsp_error == 2'd0 && f_rd_done && rsp_line[63:0] == f_rdata &&
                rsp_line[127:64] == {63'b0, f_rdata == f_cexp} && f_wr_done == (f_rdata == f_cexp));

      // Figure 6 conflict rule: of the requests parked on one word when a CAS on it decides, only
      // that CAS can succeed; the others answer failure with the word's value after the decision,
      // and never reach memory.
      if (f_busy && f_kind == F_LOST) p_conflict_no_memory : assert (!mem_req_valid);
      if (rsp_valid && f_kind == F_LOST)
        p_conflict_fails :
        assert (rsp_error == 2'd0 && rsp_line == {64'b0, f_clost});

      // No lost update: with no sprd in service, the word equals what the successful answers say;
      // a successful answer's previous value is the word as the answers before it left it.
      if (!f_busy) p_shadow_word : assert (f_word == f_shadow);
      if (rsp_valid && rsp_line[64] && f_cword == f_addr)
        p_shadow_prev : assert (rsp_line[63:0] == f_shadow);

      // Out-of-range ids and targets, and sprds without operands: an error, no memory access, and
      // (through the reference model, which ignores them) no change to any register.
      if (rsp_valid && f_kind == F_BAD_ID) p_reject_id : assert (rsp_error == 2'd1 && rsp_line == '0);
      if (rsp_valid && f_kind == F_NO_OPS)
        p_reject_no_operands : assert (rsp_error == 2'd2 && rsp_line == '0);
      if (rsp_valid && f_kind == F_BAD_TGT)
        p_reject_target : assert (rsp_error == 2'd3 && rsp_line == '0);
      if (f_busy && (f_kind == F_BAD_ID || f_kind == F_NO_OPS || f_kind == F_BAD_TGT))
        p_reject_no_memory : assert (!mem_req_valid);
      p_reject_dropped : assert (spwr_dropped == f_dropped);

      // Stall after success: no request at all from the successful compare to the write's
      // acknowledgement; spwrs at any other time.
      if (req_spwr) p_stall : assert (req_ready == !f_stall);
    end
  end
  // ---- Invariants for k-induction: the registers agree with the reference model ----
  wire f_cas_busy = f_busy && f_kind == F_CAS;
  always_comb begin
    if (f_past_valid && !rst) begin
      i_idle : assert ((state == S_IDLE) == !f_busy);
      i_state : assert (state <= S_ANSWER);
      if (f_busy) i_id : assert (rsp_id == f_id);
      if (f_busy && f_kind != F_CAS) i_short : assert (state == S_ANSWER && !f_mem_busy);
      if (f_busy && f_kind == F_BAD_ID)
        i_bad_id : assert (ans_error == 2'd1 && !ans_success && ans_prev == '0);
      if (f_busy && f_kind == F_NO_OPS)
        i_no_ops : assert (ans_error == 2'd2 && !ans_success && ans_prev == '0);
      if (f_busy && f_kind == F_BAD_TGT)
        i_bad_tgt : assert (ans_error == 2'd3 && !ans_success && ans_prev == '0);
      if (f_busy && f_kind == F_LOST)
        i_lost : assert (ans_error == 2'd0 && !ans_success && ans_prev == f_clost);
      if (f_busy && f_kind > F_CAS) i_kind : assert (0);
      if (f_cas_busy)
        i_cur :
        assert (cur_word == f_cword && cur_expected == f_cexp && cur_swap == f_cswp &&
                ans_error == 2'd0);
      if (f_cas_busy && state == S_RD_REQ)
        i_rd_req :
        assert (!f_rd_req && !f_rd_done && !f_wr_req && !f_wr_done && !f_mem_busy &&
                f_age == f_mreq_wait && !f_stall);
      if (f_cas_busy && state == S_RD_WAIT)
        i_rd_wait :
        assert (f_rd_req && !f_rd_done && f_mem_busy && !f_mem_wr && f_mem_addr == cur_word &&
                f_age <= 8'(F_WAIT) + f_mem_age && !f_stall && !f_wr_req && !f_wr_done);
      if (f_cas_busy && state == S_WR_REQ)
        i_wr_req :
        assert (f_rd_req && f_rd_done && f_rdata == f_cexp && !f_wr_req && !f_wr_done &&
                !f_mem_busy && f_stall && f_age <= 8'(F_WAIT + F_LAT + 1) + f_mreq_wait &&
                ans_prev == f_rdata && ans_success);
      if (f_cas_busy && state == S_WR_WAIT)
        i_wr_wait :
        assert (f_rd_req && f_rd_done && f_rdata == f_cexp && f_wr_req && !f_wr_done &&
                f_mem_busy && f_mem_wr && f_mem_addr == cur_word && f_wdata == cur_swap && f_stall &&
                f_age <= 8'(2 * F_WAIT + F_LAT + 1) + f_mem_age && ans_prev == f_rdata &&
                ans_success);
      if (f_cas_busy && state == S_ANSWER)
        i_answer :
        assert (f_rd_done && !f_mem_busy && !f_stall && ans_error == 2'd0 && ans_prev == f_rdata &&
                ans_success == (f_rdata == f_cexp) && f_wr_done == ans_success &&
                f_rd_req && f_wr_req == ans_success);
      if (!f_cas_busy) i_no_stall : assert (!f_stall && !f_mem_busy);
      if (f_mem_busy) i_mem_age : assert (f_mem_age >= 8'd1 && f_mem_age <= 8'(F_LAT));
      i_mreq_wait : assert (f_mreq_wait <= 8'(F_WAIT) && (mem_req_valid || f_mreq_wait == 0));
      // The word at f_addr: unchanged by anything but the write of a CAS on it.
      if (!(f_cas_busy && f_cword == f_addr)) i_word_other : assert (f_word == f_shadow);
      if (f_cas_busy && f_cword == f_addr && state != S_ANSWER)
        i_word_cas : assert (f_word == f_shadow);
      if (f_cas_busy && f_cword == f_addr && f_rd_done) i_word_read : assert (f_rdata == f_shadow);
      if (f_cas_busy && f_cword == f_addr && state == S_ANSWER)
        i_word_answer : assert (f_word == (ans_success ? f_cswp : f_shadow));
      i_parked : assert (parked == f_parked);
    end
  end
  // Per register (no labels: Yosys 0.23 gives every copy of a labelled assertion in a generate loop
  // the same name and refuses the second).
  for (genvar j = 0; j < NUM_REQUESTERS; j++) begin : g_f_reg
    always_comb begin
      if (f_past_valid && !rst && f_parked[j]) begin
        assert (bad_target[j] == !f_tgt_ok[j]);
        if (f_tgt_ok[j])
          assert (op_expected[j] == f_exp[j] && op_swap[j] == f_swp[j] && op_word[j] == f_wd[j] &&
                  failed[j] == f_lost[j]);
        if (f_tgt_ok[j] && f_lost[j]) assert (fail_value[j] == f_lost_val[j]);
      end
    end
  end
`endif

endmodule
