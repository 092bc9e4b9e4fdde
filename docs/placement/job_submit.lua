--[[
tandem: a job_submit/lua example (docs/placement.md). On slurmctld, for a job
submitted with

    sbatch --comment=tandem-trace=/shared/traces/b4.json,class=inference,rate=100 ...

it asks each node of the job's partition for a prediction (tandemd's
`POST /predict` over TCP: `[stats] tcp_listen = "0.0.0.0:9400"` and
`tcp_serves_stats = true` on the nodes, on a network only slurmctld reaches),
excludes the nodes where no GPU's verdict is accepted, and refuses the job when
no node is left. Every verdict is a prediction of tandem's GPU-sharing model,
not a measurement. Jobs without the comment are not touched; a node whose
tandemd does not answer is kept (the plugin must never be why nothing runs).

slurmctld waits for this plugin: each prediction takes seconds. Keep it to
small GPU partitions (or a cache in front of it); MAX_TIME bounds each request.
Needs curl and scontrol on the controller.
]]

local PORT = 9400
local MAX_TIME = 60                       -- seconds per request (curl --max-time)
local ACCEPT = { ["fits"] = true }        -- add ["fits only over MPS"] = true where nodes run MPS
local MAX_GPUS = 8

local function sh(cmd)
   local f = io.popen(cmd)
   local out = f:read("*a")
   f:close()
   return out
end

local function quote(s)
   return "'" .. string.gsub(s, "'", "'\\''") .. "'"
end

-- `tandem-trace=PATH[,class=C][,rate=R]` from the job's comment.
local function request_of(comment)
   if comment == nil then return nil end
   local path = string.match(comment, "tandem%-trace=([^,%s]+)")
   if path == nil then return nil end
   local query = ""
   local class = string.match(comment, "class=(%a+)")
   if class ~= nil then query = query .. "&class=" .. class end
   local rate = string.match(comment, "rate=([%d%.]+)")
   if rate ~= nil then query = query .. "&rate=" .. rate end
   return path, query
end

-- "fits", another verdict, or nil when the node could not say.
local function verdicts(host, path, query)
   local out = {}
   for gpu = 0, MAX_GPUS - 1 do
      local url = string.format("http://%s:%d/predict?gpu=%d%s", host, PORT, gpu, query)
      local answer = sh(string.format(
         "curl -s --max-time %d -w '\\n%%{http_code}' --data-binary @%s %s",
         MAX_TIME, quote(path), quote(url)))
      local body, code = string.match(answer, "^(.*)\n(%d+)$")
      if code == "404" then break end                   -- no such GPU: done
      if code == "409" and string.find(body, "has no jobs", 1, true) then
         return { "fits" }                              -- an idle GPU
      end
      if code ~= "200" then return nil end
      local v = string.match(body, '"verdict"%s*:%s*"([^"]+)"')
      if v ~= nil then table.insert(out, v) end
   end
   return out
end

function slurm_job_submit(job_desc, part_list, submit_uid)
   local path, query = request_of(job_desc.comment)
   if path == nil then return slurm.SUCCESS end
   local nodes = nil
   for _, part in pairs(part_list) do
      if job_desc.partition == nil or part.name == job_desc.partition then
         nodes = part.nodes
         break
      end
   end
   if nodes == nil then return slurm.SUCCESS end
   local excluded, kept, why = {}, 0, {}
   for host in string.gmatch(sh("scontrol show hostnames " .. quote(nodes)), "%S+") do
      local vs = verdicts(host, path, query)
      local ok = (vs == nil)                              -- no answer: keep it
      for _, v in ipairs(vs or {}) do
         if ACCEPT[v] then ok = true end
      end
      if ok then
         kept = kept + 1
      else
         table.insert(excluded, host)
         table.insert(why, host .. ": " .. table.concat(vs, ", "))
      end
   end
   if kept == 0 then
      slurm.log_user("tandem predicts (model prediction, not a measurement) that the job fits on no node: "
                     .. table.concat(why, "; "))
      return slurm.ERROR
   end
   if #excluded > 0 then
      local prior = job_desc.exc_nodes
      local list = table.concat(excluded, ",")
      job_desc.exc_nodes = (prior ~= nil and prior ~= "") and (prior .. "," .. list) or list
      slurm.log_info("tandem: excluded %s for job of uid %u (predictions)", list, submit_uid)
   end
   return slurm.SUCCESS
end

function slurm_job_modify(job_desc, job_rec, part_list, modify_uid)
   return slurm.SUCCESS
end

return slurm.SUCCESS
