// tool_fixtures.mjs - what the tool-call client tests share: the Qwen2.5 chat template (the hermes
// format) that stories260K is served with, the Functionary v3.2 template (another format), and a
// bounded tool schema every constrained call can finish.
import { dirname, resolve } from 'node:path';
import { MODEL } from './lib.mjs';

export const TEMPLATE = resolve(dirname(MODEL), '../../chat-templates/llama.cpp-2026/Qwen-Qwen2.5-7B-Instruct.jinja');
// A template of another family (Functionary v3.2: ">>>name\n{arguments}" recipient lines).
export const FUNCTIONARY = resolve(dirname(MODEL), '../../chat-templates/llama.cpp-2026/meetkai-functionary-medium-v3.2.jinja');

export const WEATHER = {
  type: 'object',
  properties: {
    city: { type: 'string', pattern: '^[A-Z][a-z]{2,9}$' },
    days: { type: 'integer', minimum: 1, maximum: 7 },
    unit: { type: 'string', enum: ['celsius', 'fahrenheit'] },
  },
  required: ['city', 'days', 'unit'],
  additionalProperties: false,
};
