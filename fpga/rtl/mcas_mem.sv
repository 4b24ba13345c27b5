// Device memory model behind the mCAS unit's memory port: WORDS 8-byte words answering every
// request after exactly LATENCY cycles.
//
// It stands in for the CXL memory controller in simulation (on the prototype board the NMP unit
// sits between the CXL IP and that controller). The access takes effect when the request is
// accepted and the answer (read data, or the old value as a write acknowledgement) travels down a
// LATENCY-deep pipeline; since the unit never has two requests in flight, where inside the latency
// the access happens cannot be observed. Addresses at or beyond WORDS read as zero and drop the
// write: the unit's cfg_words check keeps them from arriving, this keeps the model memory-safe
// if it is wired wrongly.
module mcas_mem #(
    parameter int WORDS = 1024,
    parameter int LATENCY = 4,  // cycles from request transfer to response, at least 1
    parameter int ADDR_W = 32   // width of the word address port
) (
    input logic clk,
    input logic rst,

    input  logic              req_valid,
    output logic              req_ready,
    input  logic              req_write,
    input  logic [ADDR_W-1:0] req_addr,
    input  logic [      63:0] req_wdata,

    output logic        rsp_valid,
    output logic [63:0] rsp_rdata
);

  localparam int AW = WORDS > 1 ? $clog2(WORDS) : 1;

  // Parameter checks stop the simulation at time 0: Icarus 11 does not parse elaboration-time $error.
  if (LATENCY < 1) begin : g_bad_latency
    initial $fatal(1, "mcas_mem: LATENCY must be at least 1");
  end
  if (WORDS < 1 || AW > ADDR_W) begin : g_bad_words
    initial $fatal(1, "mcas_mem: WORDS must be between 1 and 2**ADDR_W");
  end

  logic [63:0] words[WORDS];

  logic [LATENCY-1:0] pipe_valid;
  logic [63:0] pipe_data[LATENCY];

  // A new request every cycle is fine for a pipeline; the unit simply never sends one.
  assign req_ready = 1'b1;

  wire in_range = 64'(req_addr) < 64'(WORDS);
  wire [AW-1:0] index = req_addr[AW-1:0];

  always_ff @(posedge clk) begin
    if (req_valid && in_range && req_write) words[index] <= req_wdata;
    pipe_data[0] <= in_range ? words[index] : 64'b0;
    for (int s = 1; s < LATENCY; s++) pipe_data[s] <= pipe_data[s-1];
  end

  always_ff @(posedge clk) begin
    if (rst) pipe_valid <= '0;
    else pipe_valid <= {pipe_valid[LATENCY-1:0] << 1} | LATENCY'(req_valid);
  end

  assign rsp_valid = pipe_valid[LATENCY-1];
  assign rsp_rdata = pipe_data[LATENCY-1];

endmodule
