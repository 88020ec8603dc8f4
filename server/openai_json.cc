// placeholder: written by the OpenAI API work
