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
module mcas_unit
  import mcas_pkg::*;
#(
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
    input  logic                      req_valid,
    output logic                      req_ready,
    input  logic                      req_spwr,
    input  logic [              63:0] req_id,
    // verilator lint_off UNUSEDSIGNAL
    // Bytes 32-63 of the line are padding in the wire format.
    input  logic [MCAS_LINE_BITS-1:0] req_line,
    // verilator lint_on UNUSEDSIGNAL

    // Answers to sprds, in the order the sprds were accepted.
    output logic                        rsp_valid,
    input  logic                        rsp_ready,
    output logic [                63:0] rsp_id,
    output logic [MCAS_ANSWER_BITS-1:0] rsp_line,
    output logic [                 1:0] rsp_error,

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
          ans_error <= MCAS_ERR_NONE;
          if (!sprd_id_ok) begin
            ans_error <= MCAS_ERR_BAD_ID;
            state <= S_ANSWER;
          end else if (!parked[sprd_idx]) begin
            ans_error <= MCAS_ERR_NO_OPERANDS;
            state <= S_ANSWER;
          end else if (bad_target[sprd_idx]) begin
            ans_error <= MCAS_ERR_BAD_TARGET;
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

endmodule
