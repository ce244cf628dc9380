--[[
A site's own job_submit.lua, as a university GPU cluster writes it (a default account per
user, routing of long jobs, time limits), that adds slurmgpu's tiers by requiring the module
`slurmgpu gen-job-submit --module -o /etc/slurm/slurmgpu_tiers.lua` writes beside it.
Used by tests/integration/test_job_submit_module.py; docs/policy.md shows the same pattern.
]]

-- find slurmgpu_tiers.lua beside this script (slurmctld loads it from slurm.conf's directory)
local here = debug.getinfo(1, "S").source:match("^@(.*/)") or "./"
package.path = here .. "?.lua;" .. package.path
-- never a bare require: a missing or broken module would stop slurmctld from starting; then
-- every job is refused (the tiers cannot be checked) and the reason logged each time
local loaded, slurmgpu = pcall(require, "slurmgpu_tiers")
if not loaded then
  local why = tostring(slurmgpu)
  slurm.log_error("job_submit.lua: slurmgpu_tiers.lua did not load: %s", why)
  local function refuse()
    slurm.log_error("job_submit.lua: slurmgpu_tiers.lua did not load, job refused: %s", why)
    slurm.log_user("the tier rules are not loaded; job refused: tell your administrator")
    return slurm.ERROR
  end
  local function refuse_update(job_desc, job_rec, part_list, modify_uid)
    if job_desc.qos == nil and job_desc.comment == nil and job_desc.account == nil and
        job_desc.partition == nil then
      return slurm.SUCCESS  -- hold, release, StartTime=...: no tier rule involved
    end
    return refuse()
  end
  slurmgpu = { VERSION = "not loaded", fill = function() return slurm.SUCCESS end,
    job_submit = refuse, job_modify = refuse_update }
end

-- site rule 1: users whose work is charged to a project account unless they give -A
local DEFAULT_ACCOUNTS = { ["sgt-site"] = "rnd" }
-- site rule 2: jobs over a day go to the `long` partition when they name none
local LONG_MIN = 24 * 60
-- site rule 3: nothing runs longer than 2 days
local MAX_MIN = 2 * 24 * 60
-- site rule 4: jobs in the short partition run 30 minutes at most
local SHORT_MAX_MIN = 30

local function set_time(value)
  return type(value) == "number" and value ~= slurm.NO_VAL and value ~= slurm.INFINITE
end

local function site_rules(job_desc, user)
  if job_desc.account == nil and user ~= nil and DEFAULT_ACCOUNTS[user] ~= nil then
    job_desc.account = DEFAULT_ACCOUNTS[user]
  end
  if set_time(job_desc.time_limit) and job_desc.time_limit > MAX_MIN then
    slurm.log_user("site: the longest job allowed here is 2 days")
    return slurm.ESLURM_INVALID_TIME_LIMIT or slurm.ERROR
  end
  if job_desc.partition == "short" and set_time(job_desc.time_limit) and
      job_desc.time_limit > SHORT_MAX_MIN then
    slurm.log_user("site: short jobs run 30 minutes at most")
    return slurm.ESLURM_INVALID_TIME_LIMIT or slurm.ERROR
  end
  if job_desc.partition == nil and set_time(job_desc.time_limit) and
      job_desc.time_limit > LONG_MIN then
    job_desc.partition = "long"
  end
  return slurm.SUCCESS
end

function slurm_job_submit(job_desc, part_list, submit_uid)
  -- the job kind's partition and time limit first, so that the site's rules check them
  local rc = slurmgpu.fill(job_desc, part_list, submit_uid)
  if rc ~= slurm.SUCCESS then
    return rc
  end
  rc = site_rules(job_desc, job_desc.user_name)
  if rc ~= slurm.SUCCESS then
    return rc
  end
  return slurmgpu.job_submit(job_desc, part_list, submit_uid)
end

function slurm_job_modify(job_desc, job_rec, part_list, modify_uid)
  if set_time(job_desc.time_limit) and job_desc.time_limit > MAX_MIN then
    slurm.log_info("site: refused a time limit over 2 days for job %u", job_rec.job_id)
    return slurm.ESLURM_INVALID_TIME_LIMIT or slurm.ERROR
  end
  return slurmgpu.job_modify(job_desc, job_rec, part_list, modify_uid)
end

slurm.log_info("site job_submit.lua loaded with slurmgpu tiers %s", slurmgpu.VERSION)
return slurm.SUCCESS
